"""The per-GPU tuning table of gemm.dispatch, written by `python -m gemmbench tune` (do not edit by hand)."""

# GPU name as CUDA reports it -> its multiprocessor count, compute capability, when and where
# it was tuned, and per variant: shape class (gemm.dispatch.shape_class) ->
# (configuration name, K-split count). The measurements behind each entry: docs/tuning.md.
TABLES = {
    "NVIDIA H200": {
        "sm_count": 132,
        "compute_capability": "90",
        "tuned": "2026-12-01 at 3987991 (64-shape grid)",
        "coarsened": {
            "1000x1000x1000": (
                "BM128-BN64-BK16-WM32-WN64-TM8-TN8-MIN_BLOCKS3-PREFETCH1-UNROLL1",
                1,
            ),
            "1023x1023x1023-unaligned": (
                "BM128-BN64-BK16-WM32-WN64-TM8-TN8-MIN_BLOCKS3-PREFETCH1-UNROLL1",
                1,
            ),
            "1024x1024x1024": (
                "BM128-BN128-BK16-WM16-WN128-TM8-TN8-MIN_BLOCKS1-PREFETCH1-UNROLL1",
                2,
            ),
            "1024x1024x16384": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                8,
            ),
            "1024x4096x1024": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL1",
                1,
            ),
            "1200x7000x333-unaligned": (
                "BM64-BN128-BK8-WM16-WN128-TM8-TN8-MIN_BLOCKS2-PREFETCH0-UNROLL1",
                1,
            ),
            "1536x1536x1536": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                3,
            ),
            "1537x2050x3071-unaligned": (
                "BM128-BN256-BK8-WM32-WN128-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "16384x1024x4096": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "16384x256x1024": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "16384x512x2048": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "2000x2000x2000": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL1",
                1,
            ),
            "2047x2047x2047-unaligned": (
                "BM128-BN256-BK8-WM32-WN128-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "2048x14336x4096": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "2048x2048x2048": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "2048x4096x14336": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "2048x5120x1280": (
                "BM128-BN128-BK8-WM32-WN64-TM8-TN8-MIN_BLOCKS2-PREFETCH1-UNROLL1",
                1,
            ),
            "2049x2049x2049-unaligned": (
                "BM128-BN64-BK16-WM32-WN64-TM8-TN8-MIN_BLOCKS3-PREFETCH1-UNROLL1",
                1,
            ),
            "2304x2304x2304": (
                "BM128-BN64-BK16-WM32-WN64-TM8-TN8-MIN_BLOCKS3-PREFETCH1-UNROLL1",
                1,
            ),
            "2356x2340x1912": (
                "BM128-BN128-BK8-WM32-WN64-TM8-TN8-MIN_BLOCKS2-PREFETCH1-UNROLL1",
                1,
            ),
            "256x16384x1024": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "256x256x16384": ("BM64-BN64-BK16-WM8-WN64-TM4-TN4-MIN_BLOCKS2-PREFETCH0-UNROLL1", 8),
            "256x256x256": ("BM64-BN64-BK16-WM8-WN64-TM4-TN4-MIN_BLOCKS2-PREFETCH0-UNROLL1", 1),
            "256x256x512": ("BM64-BN64-BK16-WM8-WN64-TM4-TN4-MIN_BLOCKS2-PREFETCH0-UNROLL1", 1),
            "256x256x65536": ("BM64-BN64-BK16-WM8-WN64-TM4-TN4-MIN_BLOCKS2-PREFETCH0-UNROLL1", 8),
            "256x512x256": ("BM64-BN64-BK16-WM8-WN64-TM4-TN4-MIN_BLOCKS2-PREFETCH0-UNROLL1", 1),
            "256x8192x4096": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL1",
                2,
            ),
            "3000x3000x3000": (
                "BM128-BN64-BK16-WM32-WN64-TM8-TN8-MIN_BLOCKS3-PREFETCH1-UNROLL1",
                1,
            ),
            "3001x3001x3001-unaligned": (
                "BM128-BN64-BK16-WM32-WN64-TM8-TN8-MIN_BLOCKS3-PREFETCH1-UNROLL1",
                1,
            ),
            "3072x3072x3072": (
                "BM128-BN64-BK16-WM32-WN64-TM8-TN8-MIN_BLOCKS3-PREFETCH1-UNROLL1",
                1,
            ),
            "320x320x1280": ("BM64-BN64-BK16-WM8-WN64-TM4-TN4-MIN_BLOCKS2-PREFETCH0-UNROLL1", 2),
            "32768x512x512": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "3442x383x6619-unaligned": (
                "BM128-BN128-BK8-WM32-WN64-TM8-TN8-MIN_BLOCKS2-PREFETCH1-UNROLL1",
                3,
            ),
            "384x384x384": ("BM64-BN64-BK16-WM8-WN64-TM4-TN4-MIN_BLOCKS2-PREFETCH0-UNROLL1", 1),
            "384x768x256": ("BM64-BN64-BK16-WM8-WN64-TM4-TN4-MIN_BLOCKS2-PREFETCH0-UNROLL1", 1),
            "4095x4095x4095-unaligned": (
                "BM128-BN256-BK8-WM32-WN128-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "4096x1024x4096": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL1",
                1,
            ),
            "4096x11008x4096": (
                "BM128-BN256-BK8-WM32-WN128-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "4096x256x8192": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL1",
                4,
            ),
            "4096x4096x11008": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "4096x4096x4096": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "4097x4097x4097-unaligned": (
                "BM128-BN64-BK16-WM32-WN64-TM8-TN8-MIN_BLOCKS3-PREFETCH1-UNROLL1",
                1,
            ),
            "411x268x1945-unaligned": (
                "BM64-BN64-BK16-WM8-WN64-TM4-TN4-MIN_BLOCKS2-PREFETCH0-UNROLL1",
                3,
            ),
            "5000x3000x2001-unaligned": (
                "BM128-BN256-BK8-WM32-WN128-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "5120x5120x5120": (
                "BM128-BN64-BK16-WM32-WN64-TM8-TN8-MIN_BLOCKS3-PREFETCH1-UNROLL1",
                1,
            ),
            "512x12288x4096": (
                "BM128-BN128-BK16-WM16-WN128-TM8-TN8-MIN_BLOCKS1-PREFETCH1-UNROLL1",
                1,
            ),
            "512x16384x2048": (
                "BM128-BN256-BK8-WM32-WN128-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "512x256x512": ("BM64-BN64-BK16-WM8-WN64-TM4-TN4-MIN_BLOCKS2-PREFETCH0-UNROLL1", 1),
            "512x32768x512": (
                "BM128-BN256-BK8-WM32-WN128-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "512x512x32768": (
                "BM128-BN128-BK16-WM16-WN128-TM8-TN8-MIN_BLOCKS1-PREFETCH1-UNROLL1",
                8,
            ),
            "512x512x512": ("BM64-BN64-BK16-WM8-WN64-TM4-TN4-MIN_BLOCKS2-PREFETCH0-UNROLL1", 1),
            "512x512x8192": (
                "BM128-BN128-BK16-WM16-WN128-TM8-TN8-MIN_BLOCKS1-PREFETCH1-UNROLL1",
                8,
            ),
            "6000x900x1500": ("BM128-BN128-BK8-WM32-WN64-TM8-TN8-MIN_BLOCKS2-PREFETCH1-UNROLL1", 1),
            "6144x6144x6144": (
                "BM128-BN256-BK8-WM32-WN128-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "640x640x640": ("BM64-BN64-BK16-WM8-WN64-TM4-TN4-MIN_BLOCKS2-PREFETCH0-UNROLL1", 1),
            "65536x256x256": (
                "BM128-BN256-BK8-WM32-WN128-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "768x768x16384": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL1",
                6,
            ),
            "768x768x768": ("BM128-BN64-BK16-WM32-WN64-TM8-TN8-MIN_BLOCKS3-PREFETCH1-UNROLL1", 1),
            "777x1555x4099-unaligned": (
                "BM128-BN256-BK8-WM32-WN128-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                2,
            ),
            "8192x2560x10240": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "8192x256x4096": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                2,
            ),
            "8192x3072x768": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
            "8192x768x3072": ("BM128-BN128-BK8-WM32-WN64-TM8-TN8-MIN_BLOCKS2-PREFETCH1-UNROLL1", 1),
            "8192x8192x8192": (
                "BM128-BN256-BK8-WM64-WN64-TM8-TN16-MIN_BLOCKS1-PREFETCH1-UNROLL2",
                1,
            ),
        },
    },
}
