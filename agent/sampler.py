"""The metering loop: read every meter once per window boundary, turn the
readings into windows. Integrating meters (POWER_INSTANT, estimator) are also
polled between boundaries; energy counters never are (a read costs ms).

Each boundary reading is timed by the meter (the sample's own time where the
hardware stamps it) and stamped in Unix time from the wall clock read right
after it. `resume` continues each device from the reading persisted before a
restart, and the first boundary's windows then span the downtime.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from agent.counters import Counter, Last
from agent.meters.base import Meter, MeterError, Reading
from agent.windows import Sequencer, Window, window_of

log = logging.getLogger(__name__)
TICK_NS = 1_000_000_000  # the loop wakes at least this often (watchdog, stop)


class Sampler:
    def __init__(self, meters: list[Meter], clock, window_ns: int, sequencer: Sequencer,
                 sink: Callable[[list[Window]], None], *, stall_ns: int | None = None,
                 end_ns: int | None = None, tick: Callable[[], None] = lambda: None):
        self.meters, self.clock, self.window_ns = meters, clock, window_ns
        self.sequencer, self.sink, self.end_ns, self.tick = sequencer, sink, end_ns, tick
        self.counters = {m.device.device_id: Counter(m.grade, m.max_ranges_uj, stall_ns, m.max_power_uw)
                         for m in meters}
        self._last_t: dict[str, int] = {}

    def resume(self, lasts: dict[str, Last]) -> None:
        """Continue each device from its reading persisted before a restart."""
        for device, last in lasts.items():
            if device in self.counters:
                self.counters[device].resume(last)
                self._last_t[device] = last.t_ns

    def lasts(self) -> dict[str, Last]:
        """Each device's latest boundary reading, to persist with its windows."""
        return {d: last for d, c in self.counters.items() if (last := c.last()) is not None}

    def run(self, stop: threading.Event) -> None:
        """Sample until `stop` is set or, for a replay, the trace ends."""
        boundary = self.clock.now_ns()
        first = self._close(boundary)
        if first:
            self.sink(first)   # windows spanning a restart, from the persisted readings
        while True:
            previous, boundary = boundary, max(boundary + self.window_ns, self.clock.now_ns())
            last = self.end_ns is not None and boundary >= self.end_ns
            if last:
                boundary = self.end_ns
                if boundary - previous < min(m.update_ns for m in self.meters):
                    return  # a tail shorter than the counters' resolution is not a window
            if not self._wait(boundary, stop):
                return
            self.sink(self._close(boundary))
            if last:
                return

    def _wait(self, boundary: int, stop: threading.Event) -> bool:
        polled = [m for m in self.meters if m.poll_ns]
        step = min([TICK_NS, *(m.poll_ns for m in polled)])
        t = self.clock.now_ns() + step
        while t < boundary:
            if not self.clock.sleep_until(t, stop):
                return False
            for meter in polled:
                self._read(meter)
            self.tick()
            t += step
        return self.clock.sleep_until(boundary, stop)

    def _read(self, meter: Meter) -> tuple[Reading | None, str | None]:
        try:
            return meter.read(), None
        except MeterError as exc:
            log.warning("%s: %s", meter.device.device_id, exc)
            return None, str(exc)

    def _close(self, boundary: int) -> list[Window]:
        windows = []
        for meter in self.meters:
            device = meter.device.device_id
            reading, problem = self._read(meter)
            mono, wall = self.clock.now_ns(), self.clock.wall_ns()
            t = reading.t_ns if reading is not None else boundary
            if t <= self._last_t.get(device, t - 1):
                continue  # nothing newer than the last boundary (a sparse trace): the window extends
            self._last_t[device] = t
            unix = reading.unix_ns if reading is not None and reading.unix_ns is not None else wall - (mono - t)
            identity = None if meter.identity is None or reading is None else f"{meter.identity}/{reading.epoch}"
            interval = self.counters[device].step(t, reading, problem or "", unix_ns=unix, identity=identity)
            if interval is not None:
                windows.append(window_of(device, self.sequencer.next(), interval))
        self.tick()
        return windows
