"""Readings → intervals: epochs, wraps, stalls and gaps (RULES §1).

An interval is the energy between two consecutive readings of one meter. It
has a figure only when both ends are readings of the same live counter epoch;
otherwise it is a *gap* with a reason — never 0 µJ, never negative.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.meters.base import Reading
from protos.energy import Grade


@dataclass(frozen=True, slots=True)
class Interval:
    start_ns: int           # monotonic
    end_ns: int             # monotonic
    uj: int | None          # None: a gap, and `gap` says why
    grade: Grade
    gap: str | None = None


class _NewEpoch(Exception):
    pass


def counter_delta(prev: int, cur: int, max_range: int | None) -> int:
    """One counter's delta: a decrease is a wrap when the range is known
    (max_range - prev + cur, RULES §1), else the start of a new epoch."""
    if cur >= prev:
        return cur - prev
    if max_range is None:
        raise _NewEpoch(f"counter went back from {prev} to {cur} µJ with no known range: new epoch")
    return max_range - prev + cur


class Counter:
    """Follows one meter's readings and turns each new one into an interval.

    A counter that stops advancing for `stall_ns` or more is *stalled*: its
    flat intervals are gaps, and so is the one in which it moves again (the
    jump covers an unknown stretch). Real devices never draw 0 W.
    """

    def __init__(self, grade: Grade, max_ranges_uj: tuple[int | None, ...], stall_ns: int | None):
        self.grade = grade
        self._ranges = max_ranges_uj
        self._stall_ns = stall_ns
        self._prev: Reading | None = None
        self._prev_t: int | None = None
        self._changed_t: int | None = None
        self._stalled = False

    def step(self, t_ns: int, reading: Reading | None, missing: str = "no reading") -> Interval | None:
        """Feed the reading taken at `t_ns` (None when the read failed, with
        the reason in `missing`). Returns the interval since the previous
        call, or None on the very first call."""
        interval = None if self._prev_t is None else self._interval(t_ns, reading, missing)
        self._prev, self._prev_t = reading, t_ns
        return interval

    def _interval(self, t_ns: int, reading: Reading | None, missing: str) -> Interval:
        start = self._prev_t
        if reading is None:
            return self._gap(start, t_ns, f"missing reading at the end: {missing}")
        if self._prev is None:
            self._restart(t_ns)
            return self._gap(start, t_ns, "missing reading at the start")
        if reading.epoch != self._prev.epoch:
            self._restart(t_ns)
            return self._gap(start, t_ns, f"meter restarted (epoch {self._prev.epoch} → {reading.epoch})")
        try:
            uj = sum(counter_delta(p, c, r) for p, c, r in
                     zip(self._prev.counters_uj, reading.counters_uj, self._ranges, strict=True))
        except _NewEpoch as epoch:
            self._restart(t_ns)
            return self._gap(start, t_ns, str(epoch))
        return self._stall_checked(start, t_ns, uj)

    def _stall_checked(self, start: int, end: int, uj: int) -> Interval:
        if uj > 0:
            self._changed_t = end
            if self._stalled:
                self._stalled = False
                return self._gap(start, end, "counter moved again after a stall")
            return Interval(start, end, uj, self.grade)
        if self._changed_t is None:
            self._changed_t = start
        still_ns = end - self._changed_t
        if self._stall_ns is not None and still_ns >= self._stall_ns:
            self._stalled = True
            return self._gap(start, end, f"counter stalled for {still_ns // 1_000_000} ms")
        return Interval(start, end, 0, self.grade)

    def _restart(self, t_ns: int) -> None:
        self._changed_t, self._stalled = t_ns, False

    def _gap(self, start: int, end: int, why: str) -> Interval:
        return Interval(start, end, None, self.grade, why)
