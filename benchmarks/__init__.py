"""Benchmarks that report comparisons (make bench); they never fail on a ratio."""
