"""The occupancy rule over whole columns: whether every window of a batch
carries exactly the RULES §2 split of the occupancy it names, judged a batch
at a time (evidence.py's last rule, its `holds` test).

The rule itself, window by window, with what it says about a bad window, is
evidence._occupancy_problems; this module is its speed trick and may only
ever answer "every window holds" when that does. It answers false whenever
it is unsure (a version never sent, one superseded, a window with no figure
or grade): the plain rule then decides. Two shapes are fast:

- every device of the batch has a sole occupant under its version (the usual
  idle device: `unallocated` takes the window whole): five list comparisons
  at C speed, no look at each window;
- otherwise, each window's expected split computed once per
  (version, device, µJ, grade) and compared with its slice of the share
  columns.

tests/service/test_evidence_columns.py checks it against the plain rule on
random and hostile batches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import accumulate

from protos.energy import NS_PER_S, UNALLOCATED, Grade, split
from scheduler.service.windows.occupancy import Issued
from scheduler.service.windows.batch import CPU_PREFIX, Windows

SOLE = {UNALLOCATED: 1}  # the weights of a device nobody occupies, or that the scheduler did not describe

Shares = list[tuple[str, int, str]]   # (occupant, µJ, grade name), in occupant order


def expected_shares(uj: int, weights: Mapping[str, int], grade: str) -> Shares:
    """The shares RULES §2 gives `uj` split by `weights`: protos.energy.split,
    with a sole occupant (the usual idle device) taken whole without it.
    tests/e2e/test_windows.py checks both against split."""
    if (occupant := _sole(weights)) is not None:
        return [(occupant, uj, grade)]   # one occupant keeps the window's grade (split_grade)
    return [(s.occupant, s.uj, s.grade.name) for s in split(uj, weights, Grade[grade])]


def device_weights(issued: Issued, device: str, packages: frozenset[str]) -> Mapping[str, int]:
    """The weights a device's window is split by under an occupancy: its own,
    its CPU packages' for a package, else `unallocated` alone."""
    key = device if device in issued.weights else CPU_PREFIX if device in packages else None
    return issued.weights.get(key) or SOLE


def shares_hold(w: Windows, versions: list[int], entry: Callable[[int], Issued | None], packages: frozenset[str],
                grace_s: int) -> bool:
    """True only if every window with a figure and a grade names an occupancy
    the scheduler sent, not superseded more than `grace_s` before the window
    ended, and carries exactly that occupancy's split of its µJ."""
    named = set(versions)
    pairs = {(v, d) for v in named for d in set(w.device)} if len(named) == 1 else set(zip(versions, w.device))
    weights: dict[tuple[int, str], Mapping[str, int]] = {}
    for version, device in pairs:
        issued = entry(version)
        if issued is None:
            return False
        weights[version, device] = device_weights(issued, device, packages)
    grace = grace_s * NS_PER_S
    for version in named:
        superseded = entry(version).superseded_ns
        if superseded is not None and max(w.end_ns if len(named) == 1 else
                                          (e for v, e in zip(versions, w.end_ns) if v == version)) > superseded + grace:
            return False
    if None in w.uj or None in w.grade:
        return _each_holds(w, versions, weights)
    sole = {pair: _sole(each) for pair, each in weights.items()}
    if None in sole.values():
        return _each_holds(w, versions, weights)
    n = len(w.seq)
    if not (w.shares == [1] * n and w.share_uj == w.uj and w.share_grade == w.grade):
        return False
    if len(set(sole.values())) == 1:   # one occupant takes every window whole (every device idle)
        return w.occupant == [next(iter(sole.values()))] * n
    if len(named) == 1:
        return w.occupant == list(map({d: o for (_, d), o in sole.items()}.__getitem__, w.device))
    return w.occupant == list(map(sole.__getitem__, zip(versions, w.device)))


def _sole(weights: Mapping[str, int]) -> str | None:
    """The occupant that takes a window whole under these weights (None: a split)."""
    if len(weights) == 1:
        [(occupant, weight)] = weights.items()
        if weight > 0:
            return occupant
    return None


def _each_holds(w: Windows, versions: list[int], weights: Mapping[tuple[int, str], Mapping[str, int]]) -> bool:
    """Window by window, each expected split computed once per (version, device, µJ, grade)."""
    bounds = list(accumulate(w.shares, initial=0))
    known: dict[tuple, tuple[list, list, list]] = {}
    for i, (pair, uj, grade) in enumerate(zip(zip(versions, w.device), w.uj, w.grade)):
        if uj is None or grade is None:
            continue
        key = (pair, uj, grade)
        expected = known.get(key)
        if expected is None:
            shares = expected_shares(uj, weights[pair], grade)
            expected = known[key] = ([s[0] for s in shares], [s[1] for s in shares], [s[2] for s in shares])
        lo, hi = bounds[i], bounds[i + 1]
        if w.occupant[lo:hi] != expected[0] or w.share_uj[lo:hi] != expected[1] or w.share_grade[lo:hi] != expected[2]:
            return False
    return True
