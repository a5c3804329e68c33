"""Readings → intervals: epochs, wraps, stalls, gaps, and the bridge across a
restart of the agent itself (RULES §1).

An interval is the energy between two consecutive readings of one meter. It
has a figure only when both ends are readings of the same live counter epoch;
otherwise it is a *gap* with a reason — never 0 µJ, never negative.

Each interval is stamped twice: monotonic ns (its duration, and the cut) and
Unix ns (its edges on the wire). A device's intervals tile Unix time: each
starts at the stamp the one before it ended, and stamps only increase.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.meters.base import Reading
from protos.energy import NS_PER_S, GapReason, Grade


@dataclass(frozen=True, slots=True)
class Interval:
    start_ns: int           # monotonic
    end_ns: int             # monotonic
    uj: int | None          # None: a gap, and `reason` and `gap` say why
    grade: Grade
    gap: str | None = None  # for operators
    reason: GapReason | None = None
    start_unix: int = -1    # Unix ns; -1: the monotonic value (tests that need no wall clock)
    end_unix: int = -1

    @property
    def unix(self) -> tuple[int, int]:
        return ((self.start_ns if self.start_unix < 0 else self.start_unix),
                (self.end_ns if self.end_unix < 0 else self.end_unix))


@dataclass(frozen=True, slots=True)
class Last:
    """A device's last boundary reading, as the spool keeps it across restarts."""

    t_ns: int                            # monotonic, on the boot `identity` names
    unix_ns: int
    counters_uj: tuple[int, ...] | None  # None: that boundary's read failed
    identity: str | None                 # the counter epoch; None: a counter that never carries over


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


def bridged(last: Last, reading: Reading, identity: str | None, ranges: tuple[int | None, ...],
            max_power_uw: int) -> tuple[int | None, GapReason | None, str | None]:
    """Can the counter prove what the device used while the agent was down,
    from `last` (before the restart) to `reading` (the first after it)?
    (µJ, None, None) if so, else (None, reason, why). Never assumes: the
    counter epoch must be the same (GPU, driver and its load, boot), and no
    restart of the counter or unseen wrap may fit in the downtime at the
    device's ceiling power."""
    if identity is None:
        return None, GapReason.AgentDown, "this meter integrates power: nothing measured while the agent was down"
    if last.counters_uj is None:
        return None, GapReason.MeterError, "the last reading before the restart had failed"
    if last.identity != identity:
        return None, GapReason.CounterReset, f"counter epoch changed while the agent was down " \
                                             f"({last.identity} → {identity})"
    downtime = reading.t_ns - last.t_ns
    if downtime <= 0:
        return None, GapReason.CounterReset, f"reading at {reading.t_ns} is not after the last one at {last.t_ns}"
    ceiling = max_power_uw * downtime // NS_PER_S   # the most the device can use in the downtime
    total = 0
    for prev, cur, max_range in zip(last.counters_uj, reading.counters_uj, ranges, strict=True):
        if max_range is None:
            if cur < prev:
                return None, GapReason.CounterReset, f"counter went back from {prev} to {cur} µJ"
            if cur <= ceiling:
                return None, GapReason.AgentDown, f"counter at {cur} µJ could have restarted within the " \
                                                  f"{downtime // 1_000_000} ms downtime"
        elif ceiling >= max_range:
            return None, GapReason.AgentDown, f"a {max_range} µJ zone may have wrapped unseen in " \
                                              f"{downtime // 1_000_000} ms"
        total += counter_delta(prev, cur, max_range)
    if total > ceiling:
        return None, GapReason.CounterReset, f"{total} µJ in {downtime // 1_000_000} ms is above the device's ceiling"
    return total, None, None


class Counter:
    """Follows one meter's readings and turns each new one into an interval.

    A counter that stops advancing for `stall_ns` or more is *stalled*: its
    flat intervals are gaps, and so is the one in which it moves again (the
    jump covers an unknown stretch). Real devices never draw 0 W.

    `resume(last)` continues from a reading persisted before a restart: the
    next interval spans the downtime, with the counter's delta when `bridged`
    proves it, else as a gap.
    """

    def __init__(self, grade: Grade, max_ranges_uj: tuple[int | None, ...], stall_ns: int | None,
                 max_power_uw: int = 0):
        self.grade = grade
        self._ranges = max_ranges_uj
        self._stall_ns = stall_ns
        self._max_power_uw = max_power_uw
        self._prev: Reading | None = None
        self._prev_t: int | None = None
        self._prev_unix = -1
        self._changed_t: int | None = None
        self._stalled = False
        self._resumed: Last | None = None
        self.identity: str | None = None   # of the last reading fed

    def resume(self, last: Last) -> None:
        self._resumed = last
        self._prev_t, self._prev_unix = last.t_ns, last.unix_ns

    def last(self) -> Last | None:
        """The reading to persist, so a restart can continue from it."""
        if self._prev_t is None:
            return None
        counters = None if self._prev is None else self._prev.counters_uj
        return Last(self._prev_t, self._prev_unix, counters, self.identity)

    def step(self, t_ns: int, reading: Reading | None, missing: str = "no reading", *,
             unix_ns: int | None = None, identity: str | None = None) -> Interval | None:
        """Feed the reading taken at `t_ns` (stamped `unix_ns`; None when the
        read failed, with the reason in `missing`). Returns the interval since
        the previous call, or None on the very first call."""
        unix = t_ns if unix_ns is None else max(unix_ns, self._prev_unix + 1)   # stamps only increase
        interval = None
        if self._resumed is not None:
            interval = self._bridge(t_ns, reading, missing, identity)
        elif self._prev_t is not None:
            interval = self._interval(t_ns, reading, missing)
        if interval is not None and unix_ns is not None:
            interval = _stamped(interval, self._prev_unix, unix)
        self._prev, self._prev_t, self._prev_unix, self.identity = reading, t_ns, unix, identity
        return interval

    def _bridge(self, t_ns: int, reading: Reading | None, missing: str, identity: str | None) -> Interval:
        last, self._resumed = self._resumed, None
        start = last.t_ns
        if reading is None:
            self._restart(t_ns)
            return self._gap(start, t_ns, f"first reading after the restart failed: {missing}", GapReason.MeterError)
        uj, reason, why = bridged(last, reading, identity, self._ranges, self._max_power_uw)
        if uj is None:
            self._restart(t_ns)
            return self._gap(start, t_ns, why, reason)
        return self._stall_checked(start, t_ns, uj)

    def _interval(self, t_ns: int, reading: Reading | None, missing: str) -> Interval:
        start = self._prev_t
        if reading is None:
            return self._gap(start, t_ns, f"missing reading at the end: {missing}", GapReason.MeterError)
        if self._prev is None:
            self._restart(t_ns)
            return self._gap(start, t_ns, "missing reading at the start", GapReason.MeterError)
        if reading.epoch != self._prev.epoch:
            self._restart(t_ns)
            return self._gap(start, t_ns, f"meter restarted (epoch {self._prev.epoch} → {reading.epoch})",
                             GapReason.CounterReset)
        try:
            uj = sum(counter_delta(p, c, r) for p, c, r in
                     zip(self._prev.counters_uj, reading.counters_uj, self._ranges, strict=True))
        except _NewEpoch as epoch:
            self._restart(t_ns)
            return self._gap(start, t_ns, str(epoch), GapReason.CounterReset)
        return self._stall_checked(start, t_ns, uj)

    def _stall_checked(self, start: int, end: int, uj: int) -> Interval:
        if uj > 0:
            self._changed_t = end
            if self._stalled:
                self._stalled = False
                return self._gap(start, end, "counter moved again after a stall", GapReason.MeterError)
            return Interval(start, end, uj, self.grade)
        if self._changed_t is None:
            self._changed_t = start
        still_ns = end - self._changed_t
        if self._stall_ns is not None and still_ns >= self._stall_ns:
            self._stalled = True
            return self._gap(start, end, f"counter stalled for {still_ns // 1_000_000} ms", GapReason.MeterError)
        return Interval(start, end, 0, self.grade)

    def _restart(self, t_ns: int) -> None:
        self._changed_t, self._stalled = t_ns, False

    def _gap(self, start: int, end: int, why: str, reason: GapReason) -> Interval:
        return Interval(start, end, None, self.grade, why, reason)


def _stamped(interval: Interval, start_unix: int, end_unix: int) -> Interval:
    return Interval(interval.start_ns, interval.end_ns, interval.uj, interval.grade, interval.gap,
                    interval.reason, start_unix, end_unix)
