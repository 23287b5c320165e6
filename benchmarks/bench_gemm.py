"""GEMM benchmarks per variant and shape: device time, TFLOP/s, time relative to cuBLAS.

The suite itself is the harness's (gemmbench.suite), configured by pyproject.toml's
[tool.gemmbench]; the class keeps the name asv stores the history under.
"""

from .common import suite


class Gemm(suite.Suite):
    """C = A·B with each variant; samples are CUDA-event device times of one launch each."""
