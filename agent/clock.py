"""Time for the sampler: the host's clocks, or a replayed trace's.

Windows are *cut* on the monotonic clock (their durations, and when a boundary
falls) and *stamped* from the wall clock read at each boundary (`wall_ns`), so
a wall-clock step never bends a window, and an agent started before NTP has
synchronised stamps correctly from the first boundary after the step, without
a restart.
"""

from __future__ import annotations

import threading
import time


class MonotonicClock:
    def now_ns(self) -> int:
        return time.monotonic_ns()

    def wall_ns(self) -> int:
        return time.time_ns()

    def sleep_until(self, t_ns: int, stop: threading.Event) -> bool:
        """Sleep until `t_ns`; False when `stop` was set first."""
        delay = t_ns - time.monotonic_ns()
        return not stop.wait(delay / 1e9) if delay > 0 else not stop.is_set()


class ReplayClock:
    """A trace's own monotonic time, played `speed` times faster than real
    time; speed 0 jumps straight to each boundary (as fast as possible).

    Its wall clock is the trace's time shifted to Unix time: `origin_unix_ns`
    is when the trace's first row plays. Given (`--replay-origin-unix-ns`),
    every process replaying the trace agrees on where it is and on every
    stamp, so a replayed counter keeps running while the agent is down, as a
    real one does; by default the trace starts when the process does. (At
    speed 0 the trace's time is the caller's: `sleep_until` moves it.)

    Played faster than real time (speed 0 or above 1), a trace would be
    stamped ahead of the wall clock, and the scheduler refuses windows from
    the future: by default such a trace is then stamped to end when the
    process starts (`span_ns`: its length), its windows all in the past.
    """

    def __init__(self, start_ns: int, speed: float, origin_unix_ns: int | None = None, span_ns: int = 0):
        if speed < 0:
            raise ValueError(f"replay speed must be ≥ 0, got {speed}")
        self._start, self._speed = start_ns, speed
        self._virtual = start_ns
        self._origin = time.time_ns() if origin_unix_ns is None else origin_unix_ns
        self._wall0 = time.monotonic_ns() - (time.time_ns() - self._origin)
        ahead = origin_unix_ns is None and (speed == 0 or speed > 1)
        self.unix_offset_ns = self._origin - start_ns - (span_ns if ahead else 0)   # stamps only: not where it plays

    def now_ns(self) -> int:
        if self._speed == 0:
            return self._virtual
        return self._start + int((time.monotonic_ns() - self._wall0) * self._speed)

    def wall_ns(self) -> int:
        return self.now_ns() + self.unix_offset_ns

    def sleep_until(self, t_ns: int, stop: threading.Event) -> bool:
        if self._speed == 0:
            self._virtual = max(self._virtual, t_ns)
            return not stop.is_set()
        delay = (t_ns - self.now_ns()) / self._speed
        return not stop.wait(delay / 1e9) if delay > 0 else not stop.is_set()
