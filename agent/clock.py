"""Time for the sampler: the host's monotonic clock, or a replayed trace's.

Windows are cut on a monotonic clock and stamped in Unix ns only on the way
out (`unix_offset_ns`), so a wall-clock step never bends a window.
"""

from __future__ import annotations

import threading
import time


class MonotonicClock:
    def __init__(self) -> None:
        self.unix_offset_ns = time.time_ns() - time.monotonic_ns()

    def now_ns(self) -> int:
        return time.monotonic_ns()

    def sleep_until(self, t_ns: int, stop: threading.Event) -> bool:
        """Sleep until `t_ns`; False when `stop` was set first."""
        delay = t_ns - time.monotonic_ns()
        return not stop.wait(delay / 1e9) if delay > 0 else not stop.is_set()


class ReplayClock:
    """A trace's own monotonic time, played `speed` times faster than real
    time; speed 0 jumps straight to each boundary (as fast as possible)."""

    def __init__(self, start_ns: int, speed: float):
        if speed < 0:
            raise ValueError(f"replay speed must be ≥ 0, got {speed}")
        self._start, self._speed = start_ns, speed
        self._virtual = start_ns
        self._wall0 = time.monotonic_ns()
        self.unix_offset_ns = time.time_ns() - start_ns

    def now_ns(self) -> int:
        if self._speed == 0:
            return self._virtual
        return self._start + int((time.monotonic_ns() - self._wall0) * self._speed)

    def sleep_until(self, t_ns: int, stop: threading.Event) -> bool:
        if self._speed == 0:
            self._virtual = max(self._virtual, t_ns)
            return not stop.is_set()
        delay = (t_ns - self.now_ns()) / self._speed
        return not stop.wait(delay / 1e9) if delay > 0 else not stop.is_set()
