"""A worker's open claim ids (`WorkerLoad.active`), sorted: a plain sorted
tuple while there are few, a `sortedseq.Shared` beyond SMALL. A tuple is the
cheapest to copy with one id more or less while it is short (the common
worker holds a handful), but copying every id costs O(n) per admission, and
one tenant can put tens of thousands of claims on one host; a Shared copies a
block. Which one holds the ids is a function of how many there are, so two
loads with the same claims are equal whichever way they were made. Its plain
twin is the sorted tuple; tests/kernel/test_loads.py holds them equal, and
shows a Shared is never changed in place (the service keeps it with each
occupancy version)."""

from __future__ import annotations

from bisect import insort
from collections.abc import Hashable, Iterable

from .sortedseq import Shared

SMALL = 64   # the most ids kept in a tuple

Held = tuple | Shared


def held(ids: Iterable[Hashable]) -> Held:
    """The ids, held as `with_id` one at a time would hold them."""
    ordered = sorted(ids)
    return tuple(ordered) if len(ordered) <= SMALL else Shared(ordered)


def with_id(active: Held, claim_id: Hashable) -> Held:
    if type(active) is tuple:
        if len(active) < SMALL:
            grown = list(active)
            insort(grown, claim_id)
            return tuple(grown)
        active = Shared(active)
    return active.add(claim_id)


def without_id(active: Held, claim_id: Hashable) -> Held:
    if type(active) is tuple:
        shrunk = list(active)
        shrunk.remove(claim_id)
        return tuple(shrunk)
    active = active.remove(claim_id)
    return tuple(active) if len(active) <= SMALL else active
