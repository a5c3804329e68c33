"""Enum members the rules read on every decision, bound to names once: the
one place the kernel does so.

On CPython 3.11 `EnumType` defines `__getattr__`, which sends every read of
a member through its class (`Reason.ADMISSIBLE`) down the slow attribute
path, about 0.1 µs each; the hot paths (a pass over every pending claim,
placement's walk over workers, `apply`) read these few instead.
bench/instructions.py counts what that saves (docs/BENCHMARKS.md). Each name
is the member itself (`ADMISSIBLE is Reason.ADMISSIBLE`)."""

from __future__ import annotations

from protos.energy import Grade

from ..reasons import ClaimState, Placement, Reason

PENDING, ADMITTED = ClaimState.PENDING, ClaimState.ADMITTED
ADMISSIBLE = Reason.ADMISSIBLE
EXCLUSIVE = Placement.PLACEMENT_EXCLUSIVE
ESTIMATOR = Grade.Estimator
