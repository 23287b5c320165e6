"""The per-GPU tuning table of gemm.dispatch, written by `python -m gemmbench tune` (do not edit by hand)."""

# GPU name as CUDA reports it -> its multiprocessor count, compute capability, when and where
# it was tuned, and per variant: shape class (gemm.dispatch.shape_class) ->
# (configuration name, K-split count). The measurements behind each entry: docs/tuning.md.
TABLES = {
    "NVIDIA H200": {
        "sm_count": 132,
        "compute_capability": "90",
        "tuned": "2026-12-01 at 3987991 and e3b1b9d (64-shape grid), re-checked against the heuristic 2026-12-03 at 0f5f302",
        "coarsened": {
            "256x8192x4096": ("BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL1", 2),
            "4096x1024x4096": ("BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL1", 1),
            "4096x11008x4096": ("BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2", 2),
            "5120x5120x5120": ("BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2", 4),
            "512x12288x4096": ("BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2", 2),
            "512x512x512": ("BM128-BN64-BK16-WM32-WN64-TM8-TN8-MIN_BLOCKS3-PREFETCH1-UNROLL1", 4),
        },
    },
}
