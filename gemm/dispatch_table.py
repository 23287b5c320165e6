"""The per-GPU tuning table of gemm.dispatch, written by `python -m gemmbench tune` (do not edit by hand)."""

# GPU name as CUDA reports it -> its multiprocessor count, compute capability, when and where
# it was tuned, and per variant: shape class (gemm.dispatch.shape_class) ->
# (configuration name, K-split count). The measurements behind each entry: docs/tuning.md.
TABLES = {
    "NVIDIA H200": {
        "sm_count": 132,
        "compute_capability": "90",
        "tuned": "2026-11-29 at ce5a7ae",
        "coarsened": {
            "1024x1024x1024": (
                "BM128-BN128-BK16-WM16-WN128-TM8-TN8-MIN_BLOCKS1-ASYNC_COPY0-STAGES2-PREFETCH1-UNROLL1",
                2,
            ),
            "1024x1024x16384": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-ASYNC_COPY0-STAGES2-PREFETCH1-UNROLL2",
                4,
            ),
            "16384x64x4096": (
                "BM128-BN64-BK16-WM32-WN64-TM8-TN8-MIN_BLOCKS3-ASYNC_COPY0-STAGES2-PREFETCH1-UNROLL1",
                2,
            ),
            "2048x2048x2048": (
                "BM128-BN256-BK8-WM32-WN128-TM8-TN16-MIN_BLOCKS1-ASYNC_COPY0-STAGES2-PREFETCH1-UNROLL1",
                1,
            ),
            "2048x2048x2048-scalar": (
                "BM128-BN64-BK16-WM32-WN64-TM8-TN8-MIN_BLOCKS3-ASYNC_COPY0-STAGES2-PREFETCH1-UNROLL1",
                1,
            ),
            "4096x4096x4096": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-ASYNC_COPY0-STAGES2-PREFETCH1-UNROLL2",
                1,
            ),
            "8192x8192x8192": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-ASYNC_COPY0-STAGES2-PREFETCH1-UNROLL2",
                1,
            ),
        },
    },
}
