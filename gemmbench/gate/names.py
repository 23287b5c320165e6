"""What the gate measures and what it calls itself: each name is set here and nowhere else."""

from __future__ import annotations

# The one package each side's worktree supplies: the code being measured.
MEASURED_PACKAGE = "gemm"
# The headline of every summary the gate writes.
TITLE = "GEMM performance gate"
