"""The regression gate: a pull request's head against its base, interleaved, judged by this process.

The public names: :func:`run_gate` runs one gate from :class:`GateOptions` and returns a
:class:`Report`; :func:`main` is `python -m gemmbench gate`. ``calibrate`` and the spread over
several GPUs call :func:`run_gate` too.
"""

from __future__ import annotations

from .cli import main, parse_args
from .decision import EXIT_CODES, HEAD_AT_FAULT, Comparison, Report, only_uncertain
from .names import MEASURED_PACKAGE, TITLE
from .options import (
    DEFAULT_PROVIDER,
    MAX_ROUNDS,
    MAX_SAMPLES,
    GateOptions,
    bounded_float,
    bounded_int,
    case_names,
)
from .run import progress, run_gate

__all__ = [
    "DEFAULT_PROVIDER",
    "EXIT_CODES",
    "HEAD_AT_FAULT",
    "MAX_ROUNDS",
    "MAX_SAMPLES",
    "MEASURED_PACKAGE",
    "TITLE",
    "Comparison",
    "GateOptions",
    "Report",
    "bounded_float",
    "bounded_int",
    "case_names",
    "main",
    "only_uncertain",
    "parse_args",
    "progress",
    "run_gate",
]
