"""Shared helpers for the agent tests: a fake pynvml (hardware faked only at
the NVML boundary), a fake powercap tree, and a replay driver."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.meters.replay import ReplayMeter, bundled_trace, load_trace
from agent.sampler import Sampler
from agent.windows import Sequencer

TRACE = bundled_trace()


class FakeNVMLError(Exception):
    """Like pynvml.NVMLError: carries the NVML return code in `.value`."""

    def __init__(self, value):
        super().__init__(value)
        self.value = value


@dataclass
class FakeGpu:
    uuid: str = "GPU-00000000-0000-0000-0000-000000000001"
    name: str = "NVIDIA H200"
    memory: int = 150754820096
    mig: int = 0
    energy_mj: int = 1_000_000
    power_mw: int = 80_000
    util: int = 50
    energy_error: int | None = None   # an NVML return code to fail total energy with
    power_error: int | None = None
    mig_error: int | None = None
    energy_sample_us: int = 0         # the field value's timestamp (Unix µs); 0: none given
    power_limit_mw: int = 700_000


class FakeValue:
    """Like pynvml.c_nvmlValue_t: a union read by the member for its type."""

    def __init__(self, value: int):
        self.uiVal = self.ulVal = self.ullVal = value


class FakeFieldValue:
    """Like pynvml.c_nvmlFieldValue_t, field for field (the contract test compares them)."""

    def __init__(self, fieldId, nvmlReturn, valueType, value, timestamp=0, latencyUsec=0, scopeId=0):
        self.fieldId, self.scopeId, self.timestamp, self.latencyUsec = fieldId, scopeId, timestamp, latencyUsec
        self.valueType, self.nvmlReturn, self.value = valueType, nvmlReturn, FakeValue(value)


@dataclass
class FakePynvml:
    """The pynvml functions and constants the agent uses, hard-coded (not
    copied from pynvml) so that the contract test can compare the two."""

    gpus: list[FakeGpu] = field(default_factory=lambda: [FakeGpu()])
    init_error: int | None = None
    energy_reads: int = 0

    NVMLError = FakeNVMLError
    NVML_SUCCESS = 0
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_ERROR_UNKNOWN = 999
    NVML_FI_DEV_POWER_INSTANT = 186
    NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83
    NVML_VALUE_TYPE_UNSIGNED_INT = 1
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
    NVML_DEVICE_MIG_ENABLE = 1
    driver_version: str = "580.159.04"

    def _fail(self, code):
        if code is not None:
            raise FakeNVMLError(code)

    def nvmlInit(self):
        self._fail(self.init_error)

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle):
        return handle.uuid

    def nvmlDeviceGetName(self, handle):
        return handle.name

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        return SimpleNamespace(total=handle.memory, free=handle.memory, used=0)

    def nvmlDeviceGetMigMode(self, device):
        self._fail(device.mig_error)
        return [device.mig, device.mig]

    def nvmlSystemGetDriverVersion(self):
        return self.driver_version

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return handle.power_limit_mw

    def nvmlDeviceGetFieldValues(self, handle, fieldIds):
        values = []
        for f in fieldIds:
            if f == self.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
                self.energy_reads += 1
                values.append(FakeFieldValue(f, handle.energy_error or 0, self.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                                             handle.energy_mj, handle.energy_sample_us, 4196))
            else:
                values.append(FakeFieldValue(f, handle.power_error or 0, self.NVML_VALUE_TYPE_UNSIGNED_INT,
                                             handle.power_mw))
        return values

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=handle.util, memory=0)


@pytest.fixture
def fake_nvml() -> FakePynvml:
    return FakePynvml()


class StepClock:
    """A clock the test moves by hand."""

    unix_offset_ns = 0

    def __init__(self, t_ns: int = 0):
        self.t = t_ns

    def now_ns(self) -> int:
        return self.t

    def wall_ns(self) -> int:
        return self.t + self.unix_offset_ns

    def sleep_until(self, t_ns, stop):
        self.t = max(self.t, t_ns)
        return not stop.is_set()


def make_zone(root: Path, name: str, zone_name: str, energy: int, max_range: int = 262143328850) -> Path:
    zone = root / name
    zone.mkdir(parents=True)
    (zone / "name").write_text(zone_name + "\n")
    (zone / "energy_uj").write_text(f"{energy}\n")
    (zone / "max_energy_range_uj").write_text(f"{max_range}\n")
    return zone


def replay(path: Path = TRACE, window_ms: int = 1000, speed: float = 0.0):
    """Windows of a replayed trace, and the meter (its rows) and clock."""
    meter = ReplayMeter(path, speed)
    clock = meter.clock
    windows = []
    Sampler([meter], clock, window_ms * 1_000_000, Sequencer(), windows.extend,
            stall_ns=500_000_000, end_ns=meter.end_ns).run(threading.Event())
    return windows, meter, clock


@pytest.fixture
def kit() -> SimpleNamespace:
    """The helpers above, for test modules (importlib mode cannot import conftest)."""
    return SimpleNamespace(trace=TRACE, replay=replay, replay_rows=load_trace(TRACE)[0], StepClock=StepClock, make_zone=make_zone,
                           FakePynvml=FakePynvml, FakeGpu=FakeGpu, FakeFieldValue=FakeFieldValue)


@pytest.fixture
def in_process(monkeypatch):
    """Run agent.main.main() inside pytest without taking over the process's
    logging handlers and signal handlers (threads outlive a test's capture)."""
    from protos import daemon
    monkeypatch.setattr(daemon, "setup_logging", lambda level: None)
    monkeypatch.setattr(daemon, "stop_on_signals", lambda stop: None)
