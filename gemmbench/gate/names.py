"""What the gate measures and what it calls itself: each name is set here and nowhere else."""

from __future__ import annotations

from .. import config as harness_config

# The one package each side's worktree supplies: the code being measured ([tool.gemmbench] package).
MEASURED_PACKAGE = harness_config.load().package
# The headline of every summary the gate writes ([tool.gemmbench] title).
TITLE = harness_config.load().gate_title
