"""The last resort: configured watts × utilisation, graded Estimator.

Used only for a device whose operator configured watts for its kind, never by
default: an unmetered device has no figure, not a guessed or a zero one.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.meters.base import DeviceInfo, Integrator, Reading
from protos.energy import Grade
from protos.pool.v1 import types_pb2

POLL_NS = 100_000_000


class EstimatorMeter:
    meter_kind = types_pb2.ESTIMATOR
    grade = Grade.Estimator
    max_ranges_uj = (None,)
    poll_ns = POLL_NS
    update_ns = POLL_NS
    identity = None   # an integral in this process: nothing carries over a restart

    def __init__(self, device: DeviceInfo, watts: int, utilisation_pct: Callable[[], float], clock):
        if watts <= 0:
            raise ValueError(f"estimator watts for {device.device_id} must be positive, got {watts}")
        self.device, self.clock = device, clock
        self._uw_at_full = watts * 1_000_000
        self.max_power_uw = self._uw_at_full
        self._utilisation = utilisation_pct
        self._integrator = Integrator()

    def read(self) -> Reading:
        pct = min(100.0, max(0.0, self._utilisation()))
        t = self.clock.now_ns()
        return Reading(t, (self._integrator.sample(t, int(self._uw_at_full * pct) // 100),))
