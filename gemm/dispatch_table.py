"""The per-GPU tuning table of gemm.dispatch, written by `python -m gemmbench tune` (do not edit by hand)."""

# GPU name as CUDA reports it -> its multiprocessor count, compute capability, when and where
# it was tuned, and per variant: shape class (gemm.dispatch.shape_class) ->
# (configuration name, K-split count). The measurements behind each entry: docs/tuning.md.
TABLES = {
    "NVIDIA H200": {
        "sm_count": 132,
        "compute_capability": "90",
        "tuned": "2026-12-01 at 3987991 and e3b1b9d (64-shape grid), re-checked against the heuristic 2026-12-02 at 3c9a3e2",
        "coarsened": {
            "2048x5120x1280": ("BM128-BN128-BK8-WM32-WN64-TM8-TN8-MIN_BLOCKS2-PREFETCH1-UNROLL1", 1),
            "2356x2340x1912": ("BM128-BN128-BK8-WM32-WN64-TM8-TN8-MIN_BLOCKS2-PREFETCH1-UNROLL1", 1),
            "256x8192x4096": ("BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL1", 2),
            "384x768x256": ("BM64-BN64-BK16-WM8-WN64-TM4-TN4-MIN_BLOCKS2-PREFETCH0-UNROLL1", 1),
            "4096x1024x4096": ("BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL1", 1),
            "4096x11008x4096": ("BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2", 2),
            "5120x5120x5120": ("BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2", 4),
            "512x12288x4096": ("BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2", 2),
            "512x512x512": ("BM128-BN64-BK16-WM32-WN64-TM8-TN8-MIN_BLOCKS3-PREFETCH1-UNROLL1", 4),
            "6000x900x1500": ("BM128-BN128-BK8-WM32-WN64-TM8-TN8-MIN_BLOCKS2-PREFETCH1-UNROLL1", 1),
            "8192x768x3072": ("BM128-BN128-BK8-WM32-WN64-TM8-TN8-MIN_BLOCKS2-PREFETCH1-UNROLL1", 1),
        },
    },
}
