"""One entitlement check's verdict and the figures behind it (RULES §3):
what entitlement.py returns and explain shows."""

from __future__ import annotations

from typing import NamedTuple


class Fit(NamedTuple):
    """Whether a claim fits at `node`: its guarantee there, the usage the
    check compared, and for the surplus pass its allowance and borrow limit."""

    ok: bool
    node: str
    guarantee: int
    usage: int
    allowance: int = 0
    limit: int | None = None

