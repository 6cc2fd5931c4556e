"""Tests of the benchmark scripts (``benchmarks/``). A package, so that its test modules are imported as
``benchmarks.test_*`` and may share a basename with a flat ``tests/test_*.py`` without a clash."""
