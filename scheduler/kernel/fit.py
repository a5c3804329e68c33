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


def fit(ok: bool, node: str, guarantee: int, usage: int, allowance: int = 0, limit: int | None = None) -> Fit:
    """A Fit, without NamedTuple's Python-level `__new__` (several are made
    per decision; tested equal to the plain constructor)."""
    return _new_tuple(Fit, (ok, node, guarantee, usage, allowance, limit))


_new_tuple = tuple.__new__
