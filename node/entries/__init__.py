"""Entries and links: posting them, and the reads and searches over them."""
