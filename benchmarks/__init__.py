"""Benchmarks: speed and memory targets, run with `make bench` (never timed tests)."""
