"""Tools beside the warehouse, not part of it: `python -m tools.generate` writes synthetic Hub
datasets for tests, examples and benchmarks."""
