"""Runnable scenarios on real nodes: stories (household, federation, partition) and benchmarks (`scenarios.bench`)."""
