"""The metering loop: read every meter once per window boundary, turn the
readings into windows. Integrating meters (POWER_INSTANT, estimator) are also
polled between boundaries; energy counters never are (a read costs ms).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from agent.counters import Counter
from agent.meters.base import Meter, MeterError
from agent.windows import Sequencer, Window, window_of

log = logging.getLogger(__name__)
TICK_NS = 1_000_000_000  # the loop wakes at least this often (watchdog, stop)


class Sampler:
    def __init__(self, meters: list[Meter], clock, window_ns: int, sequencer: Sequencer,
                 sink: Callable[[list[Window]], None], *, stall_ns: int | None = None,
                 end_ns: int | None = None, tick: Callable[[], None] = lambda: None):
        self.meters, self.clock, self.window_ns = meters, clock, window_ns
        self.sequencer, self.sink, self.end_ns, self.tick = sequencer, sink, end_ns, tick
        self.counters = {m.device.device_id: Counter(m.grade, m.max_ranges_uj, stall_ns) for m in meters}
        self._last_t: dict[str, int] = {}

    def run(self, stop: threading.Event) -> None:
        """Sample until `stop` is set or, for a replay, the trace ends."""
        boundary = self.clock.now_ns()
        self._close(boundary)
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

    def _read(self, meter: Meter):
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
            t = reading.t_ns if reading is not None else boundary
            if t <= self._last_t.get(device, t - 1):
                continue  # nothing newer than the last boundary (a sparse trace): the window extends
            self._last_t[device] = t
            interval = self.counters[device].step(t, reading, problem or "")
            if interval is not None:
                windows.append(window_of(device, self.sequencer.next(), interval, self.clock.unix_offset_ns))
        self.tick()
        return windows
