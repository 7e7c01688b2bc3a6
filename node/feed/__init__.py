"""The feed: entries in arrival order after a cursor, with long-poll."""
