"""The speed-up report moved to the harness: `python -m gemmbench report` (this package imports nothing from it)."""

import sys

print(
    "the speed-up report is `python -m gemmbench report [N | MxNxK ...] [options]`", file=sys.stderr
)
sys.exit(2)
