"""The one interface every meter speaks, and the power integrator the
ModelBased and Estimator meters share.

A meter reports *cumulative counters* in µJ at a monotonic instant. Turning
two readings into an energy figure (wraps, epochs, gaps) is `agent.counters`'
job, never the meter's: a meter only says what the hardware said.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from protos.energy import NS_PER_S, Grade
from protos.pool.v1 import types_pb2

# The NVML energy counter advances every ~100 ms (fixtures/nvml-h200): shorter
# windows measure the counter's steps, not the device.
COUNTER_UPDATE_NS = 100_000_000


@dataclass(frozen=True, slots=True)
class Reading:
    """Cumulative counter values at one monotonic instant. Most meters have one
    counter; a RAPL package has its package zone plus its dram zone."""

    t_ns: int
    counters_uj: tuple[int, ...]
    epoch: int = 0  # a meter bumps it when it knows the counter restarted


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    device_id: str          # GPU UUID, or "cpu:<package>"
    kind: int               # types_pb2.DeviceKind
    device_type: str        # GPU name (its type), or "cpu"
    memory_bytes: int = 0
    mig_enabled: bool = False


class MeterError(Exception):
    """A reading that could not be taken. Its message is for operators."""


class Meter(Protocol):
    device: DeviceInfo
    meter_kind: int                          # types_pb2.MeterKind
    grade: Grade
    max_ranges_uj: tuple[int | None, ...]    # per counter; None: no known range
    poll_ns: int | None                      # read this often between boundaries (integrators)
    update_ns: int                           # how often the source itself changes

    def read(self) -> Reading:
        """Read now. Raises MeterError, never returns a made-up value."""
        ...


class Integrator:
    """Trapezoidal integration of power samples into a cumulative µJ counter,
    so a power meter looks like an energy counter to everything downstream."""

    def __init__(self) -> None:
        self._last: tuple[int, int] | None = None
        self._uw_ns2 = 0  # Σ (p0 + p1) × dt, kept exact so flooring never drifts

    def sample(self, t_ns: int, power_uw: int) -> int:
        if self._last is not None:
            t0, p0 = self._last
            self._uw_ns2 += (p0 + power_uw) * max(0, t_ns - t0)
        self._last = (t_ns, power_uw)
        return self._uw_ns2 // (2 * NS_PER_S)


GPU = types_pb2.GPU
CPU_PACKAGE = types_pb2.CPU_PACKAGE
