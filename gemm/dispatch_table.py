"""The per-GPU tuning table of gemm.dispatch, written by `python -m gemmbench tune` (do not edit by hand)."""

# GPU name as CUDA reports it -> its multiprocessor count, compute capability, when and where
# it was tuned, and per variant: shape class (each dimension rounded to a power of two) ->
# (configuration name, K-split count). The measurements behind each entry: docs/tuning.md.
TABLES = {}
