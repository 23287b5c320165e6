"""Kinds of machine problem as data: what made a measurement untrustworthy, and its message."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ProblemKind(enum.Enum):
    """Why a measurement cannot be trusted; callers branch on this, never on the message."""

    THROTTLED = "GPU throttled"
    BUSY = "GPU busy"
    CLOCK_DROP = "clock drop"


@dataclass(frozen=True)
class Problem:
    """One problem seen on the machine: its kind, and the sentence a person reads."""

    kind: ProblemKind
    message: str

    def __str__(self) -> str:
        return self.message
