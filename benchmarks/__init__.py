"""The benchmark suite behind ``hearth bench`` (docs/benchmarks.md: the scenarios, their goals, the latest results)."""
