"""The benchmark suite behind ``hearth bench`` (see ../shared/docs/BENCHMARKS.md)."""
