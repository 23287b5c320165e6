"""asv benchmark suite of the gemm kernels (see docs/benchmarks.md)."""
