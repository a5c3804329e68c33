"""The one interface every meter speaks, and the power integrator the
ModelBased and Estimator meters share.

A meter reports *cumulative counters* in µJ at a monotonic instant. Turning
two readings into an energy figure (wraps, epochs, gaps) is `agent.counters`'
job, never the meter's: a meter only says what the hardware said, including
what identifies its counter's epoch (`identity`) and the most power the device
can draw (`max_power_uw`), which together decide whether a counter can prove
what happened while the agent was down.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
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
    unix_ns: int | None = None  # the sample's own wall-clock time, where the hardware stamps it (NVML)


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
    # What names the counter's epoch, stable across agent restarts exactly as
    # long as the counter keeps counting (device, driver and its load, boot);
    # None for a counter that lives in the agent (a power integrator).
    identity: str | None
    max_power_uw: int                        # a ceiling on the device's draw, for restart proofs

    def read(self) -> Reading:
        """Read now. Raises MeterError, never returns a made-up value."""
        ...


BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id(path: Path = BOOT_ID) -> str:
    """The kernel's id for this boot: a counter cannot carry across a reboot."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""   # no proof of the boot: `identity` callers treat "" as unknown


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
