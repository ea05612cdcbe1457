"""Metric sources, one module each; `bench.metrics.registry` is the one place they are named."""
