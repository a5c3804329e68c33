"""Columns derived from one host's batch, for the evidence rules: each
computed when a rule first reads it, once per batch.

Three have a speed trick, each beside the plain computation it must equal
(tests/service/test_evidence_columns.py compares them on random batches):

- `sums`, each window's shares summed: when every window has one share
  (a sole occupant's window, the usual one), that share is the sum;
- `previous`, the end of the window before each on its device: when the
  batch's devices repeat in one fixed order (an agent cuts every device at
  each boundary), it is the end `period` windows back;
- `mean_uw`, each window's mean power from its uj and span: when every
  window has a figure and a positive span, a map over the columns rather
  than a call per window.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from itertools import accumulate, repeat
from operator import floordiv, mul, sub

from protos.energy import NS_PER_S, mean_uw
from scheduler.service.windows.batch import Windows


class Derived:
    def __init__(self, windows: Windows, ends: Mapping[str, int]) -> None:
        self.windows = windows
        self.ends = ends   # device id -> the end of its last counted window

    @cached_property
    def devices(self) -> set[str]:
        return set(self.windows.device)

    @cached_property
    def shortest(self) -> int | None:
        """The shortest window's duration (None for no window)."""
        return min(map(sub, self.windows.end_ns, self.windows.start_ns), default=None)

    @cached_property
    def one_share_each(self) -> bool:
        return self.windows.shares == [1] * len(self.windows.shares)

    @cached_property
    def bounds(self) -> list[int]:
        """Window i's shares are share columns [bounds[i], bounds[i + 1])."""
        return list(accumulate(self.windows.shares, initial=0))

    @cached_property
    def sums(self) -> list[int]:
        """Each window's shares' µJ, summed."""
        if self.one_share_each:
            return self.windows.share_uj
        return sums_plainly(self.windows, self.bounds)

    @cached_property
    def mean_uw(self) -> list[int | None]:
        """Each window's mean power, as its uj and span give it (protos.energy.mean_uw):
        when every window has a figure and a positive span, three maps over
        the columns."""
        w = self.windows
        if None not in w.uj and self.shortest is not None and self.shortest > 0:
            return list(map(floordiv, map(mul, w.uj, repeat(NS_PER_S)), map(sub, w.end_ns, w.start_ns)))
        return mean_uw_plainly(w)

    @cached_property
    def previous(self) -> list[int]:
        """For each window, the end of the window before it on its device: in
        the batch, else the last one counted (0 for a device's first window)."""
        device, period = self.windows.device, len(self.devices)
        if period and len(set(device[:period])) == period and device[period:] == device[:-period]:
            return [self.ends.get(d, 0) for d in device[:period]] + self.windows.end_ns[:-period]
        return previous_plainly(self.ends, self.windows)


def sums_plainly(w: Windows, bounds: list[int]) -> list[int]:
    total = list(accumulate(w.share_uj, initial=0))
    return list(map(sub, map(total.__getitem__, bounds[1:]), map(total.__getitem__, bounds)))


def mean_uw_plainly(w: Windows) -> list[int | None]:
    return [mean_uw(u, e - s) for u, s, e in zip(w.uj, w.start_ns, w.end_ns)]


def previous_plainly(ends: Mapping[str, int], w: Windows) -> list[int]:
    last = dict(ends)
    out = []
    for device, end in zip(w.device, w.end_ns):
        out.append(last.get(device, 0))
        last[device] = end
    return out
