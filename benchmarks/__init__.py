"""asv benchmark suites of mmsuite: one module per backend (see docs/benchmarking.md)."""
