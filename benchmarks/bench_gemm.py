"""GEMM benchmarks per variant and shape: device time, TFLOP/s, time relative to cuBLAS.

The suite itself is the harness's (gemmbench.suite), configured by pyproject.toml's
[tool.gemmbench]; the class keeps the name asv stores the history under.
"""

from .common import suite

# asv files each benchmark's results under a version, by default a hash of its source code, and
# publishes only results of the current version. The suite's code moved into gemmbench.suite
# measuring exactly what it measured here, so each benchmark keeps the version its stored history
# was recorded under. Change a benchmark's version when what it measures changes.
HISTORY_VERSIONS = {
    "time_gemm": "3a136910cb5fad0d0ff39f9a97ba7c1803fcaaf813a95d38dddb535a5d926bcd",
    "track_tflops": "efbcf22652dadfa18489b46613a538e1d57dd883b60e932750d8a19177855b5c",
    "track_time_vs_cublas": "ef511a5cf38e0b97ec0130acad3ff07c0c9aff2bde17d4b9a2c815d0f6a522dd",
}


class Gemm(suite.Suite):
    """C = A·B with each variant; samples are CUDA-event device times of one launch each.

    ``figures``, every benchmark's first argument, holds the commit's figures and the samples
    time_gemm replays, measured once by the suite's setup_cache.
    """

    def time_gemm(self, figures, variant, shape):
        super().time_gemm(figures, variant, shape)

    def track_tflops(self, figures, variant, shape):
        return super().track_tflops(figures, variant, shape)

    def track_time_vs_cublas(self, figures, variant, shape):
        return super().track_time_vs_cublas(figures, variant, shape)

    time_gemm.setup = suite.Suite.time_gemm.setup
    time_gemm.version = HISTORY_VERSIONS["time_gemm"]
    track_tflops.version = HISTORY_VERSIONS["track_tflops"]
    track_tflops.unit = suite.Suite.track_tflops.unit
    track_time_vs_cublas.version = HISTORY_VERSIONS["track_time_vs_cublas"]
    track_time_vs_cublas.unit = suite.Suite.track_time_vs_cublas.unit
