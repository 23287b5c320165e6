"""The regression harness around `gemm`: device timing, machine identity, thresholds, gate and history."""
