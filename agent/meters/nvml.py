"""NVIDIA GPUs through NVML (nvidia-ml-py, `import pynvml`).

Per GPU, best first: the total-energy counter (mJ since driver load, HwShunt);
where that is not supported, POWER_INSTANT integrated over time (ModelBased).
Never nvmlDeviceGetPowerUsage: it is a smoothed average that lags the load.

The counter is read through nvmlDeviceGetFieldValues with
NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, because a field value carries the
driver's own timestamp of the sample: the counter only moves every ~100 ms,
so a window's edge is put where the counter moved, not where we asked.

Cost (fixtures/nvml-h200): one counter read is ~3–4 ms of CPU and reads do not
parallelise; POWER_INSTANT is ~14 µs. So the counter is read once per window
boundary, and only the power meter is polled between boundaries.

The pynvml module is injected, so tests hand in a fake at this one boundary.
"""

from __future__ import annotations

from pathlib import Path

from agent.meters.base import COUNTER_UPDATE_NS, GPU, DeviceInfo, Integrator, MeterError, Reading, boot_id
from protos.energy import Grade, mj_to_uj, mw_to_uw
from protos.pool.v1 import types_pb2

POWER_POLL_NS = 100_000_000
# The kernel module's sysfs directory: its inode is allocated anew each time the
# module loads, so it tells one driver load from the next (the counter restarts
# with the driver).
DRIVER_SYSFS = Path("/sys/module/nvidia")
# A sample older than this is not the counter's current value (it updates every
# ~100 ms): its timestamp is not trusted, and the read time is used instead.
MAX_SAMPLE_AGE_NS = 1_000_000_000
UNKNOWN_LIMIT_UW = 1_000_000_000   # 1 kW, for a GPU that does not report its power limit


class NvmlError(MeterError):
    """Any NVML failure; the subclasses are the ones operators act on."""


class NvmlNoDriver(NvmlError):
    pass


class NvmlNotSupported(NvmlError):
    pass


class NvmlGpuLost(NvmlError):
    pass


def typed_error(nvml, exc: Exception, what: str) -> NvmlError:
    """Map a pynvml.NVMLError to our types, with a message that says what to do."""
    code = getattr(exc, "value", None)
    if code in (nvml.NVML_ERROR_LIBRARY_NOT_FOUND, nvml.NVML_ERROR_DRIVER_NOT_LOADED):
        return NvmlNoDriver(f"NVML: no driver ({what}: {exc}); is the NVIDIA driver installed and loaded?")
    if code in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
        return NvmlNotSupported(f"NVML: {what} not supported on this GPU or driver ({exc})")
    if code == nvml.NVML_ERROR_GPU_IS_LOST:
        return NvmlGpuLost(f"NVML: GPU lost during {what} ({exc}); it needs a reset or a reboot")
    return NvmlError(f"NVML: {what} failed ({exc})")


class Nvml:
    """An initialised NVML: calls go through `call`, which maps errors."""

    def __init__(self, module=None, driver_sysfs: Path = DRIVER_SYSFS):
        if module is None:
            import pynvml as module
        self.m = module
        self.call(module.nvmlInit, what="nvmlInit")
        self.driver = _driver_epoch(self, driver_sysfs)

    def call(self, fn, *args, what: str):
        try:
            return fn(*args)
        except self.m.NVMLError as exc:
            raise typed_error(self.m, exc, what) from None

    def shutdown(self) -> None:
        self.call(self.m.nvmlShutdown, what="nvmlShutdown")

    def gpus(self) -> list[tuple[object, DeviceInfo]]:
        m = self.m
        found = []
        for index in range(self.call(m.nvmlDeviceGetCount, what="device count")):
            handle = self.call(m.nvmlDeviceGetHandleByIndex, index, what=f"GPU {index}")
            found.append((handle, self._info(handle, index)))
        return found

    def _info(self, handle, index: int) -> DeviceInfo:
        m = self.m
        uuid = _text(self.call(m.nvmlDeviceGetUUID, handle, what=f"GPU {index} UUID"))
        name = _text(self.call(m.nvmlDeviceGetName, handle, what=f"GPU {index} name"))
        memory = self.call(m.nvmlDeviceGetMemoryInfo, handle, what=f"GPU {index} memory").total
        try:
            mig = self.call(m.nvmlDeviceGetMigMode, handle, what="MIG mode")[0] == m.NVML_DEVICE_MIG_ENABLE
        except NvmlNotSupported:
            mig = False  # GPUs without MIG answer NotSupported
        return DeviceInfo(uuid, GPU, name, memory, mig)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _driver_epoch(nvml: Nvml, sysfs: Path) -> str | None:
    """The driver version, its load (module inode) and the boot: what the
    energy counter's epoch depends on besides the GPU. None when any is unknown."""
    try:
        version = _text(nvml.call(nvml.m.nvmlSystemGetDriverVersion, what="driver version"))
        load = sysfs.stat().st_ino
    except (NvmlError, OSError):
        return None
    boot = boot_id()
    return f"driver={version}:load={load}:boot={boot}" if boot else None


def _power_limit_uw(nvml: Nvml, handle) -> int:
    try:
        return mw_to_uw(nvml.call(nvml.m.nvmlDeviceGetEnforcedPowerLimit, handle, what="power limit"))
    except NvmlError:
        return UNKNOWN_LIMIT_UW


class NvmlEnergyMeter:
    """NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ since driver load): HwShunt.
    No documented range, so a decrease (driver reload, GPU reset) starts a new
    epoch (RULES §1). Each reading is timed by the sample's own timestamp."""

    meter_kind = types_pb2.NVML_ENERGY
    grade = Grade.HwShunt
    max_ranges_uj = (None,)
    poll_ns = None
    update_ns = COUNTER_UPDATE_NS

    def __init__(self, nvml: Nvml, handle, device: DeviceInfo, clock):
        self.nvml, self.handle, self.device, self.clock = nvml, handle, device, clock
        self.identity = None if nvml.driver is None else f"nvml:{device.device_id}:{nvml.driver}"
        self.max_power_uw = 2 * _power_limit_uw(nvml, handle)   # twice the enforced limit: a safe ceiling

    def read(self) -> Reading:
        m = self.nvml.m
        field = self.nvml.call(m.nvmlDeviceGetFieldValues, self.handle, [m.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION],
                               what="total energy")[0]
        mono, wall = self.clock.now_ns(), self.clock.wall_ns()
        if field.nvmlReturn != m.NVML_SUCCESS:
            raise typed_error(m, m.NVMLError(field.nvmlReturn), "total energy")
        if field.valueType != m.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
            raise NvmlError(f"NVML: total energy came as value type {field.valueType}, not unsigned long long")
        age = wall - field.timestamp * 1000   # the sample's timestamp is Unix µs
        if field.timestamp <= 0 or not 0 <= age <= MAX_SAMPLE_AGE_NS:
            age = 0   # no usable timestamp (0, or from another clock): the read's own time
        return Reading(mono - age, (mj_to_uj(field.value.ullVal),), unix_ns=wall - age)


class NvmlPowerMeter:
    """POWER_INSTANT through nvmlDeviceGetFieldValues, integrated: ModelBased.
    Polled every 100 ms (~14 µs a read); agrees with the counter within ~1 %
    on the H200 trace."""

    meter_kind = types_pb2.NVML_POWER
    grade = Grade.ModelBased
    max_ranges_uj = (None,)
    poll_ns = POWER_POLL_NS
    update_ns = POWER_POLL_NS

    identity = None   # the integral lives in this process: it cannot carry over a restart

    def __init__(self, nvml: Nvml, handle, device: DeviceInfo, clock):
        self.nvml, self.handle, self.device, self.clock = nvml, handle, device, clock
        self._integrator = Integrator()
        self.max_power_uw = 2 * _power_limit_uw(nvml, handle)

    def power_mw(self) -> int:
        m = self.nvml.m
        field = self.nvml.call(m.nvmlDeviceGetFieldValues, self.handle, [m.NVML_FI_DEV_POWER_INSTANT],
                               what="POWER_INSTANT")[0]
        if field.nvmlReturn != m.NVML_SUCCESS:
            raise typed_error(m, m.NVMLError(field.nvmlReturn), "POWER_INSTANT")
        return field.value.uiVal

    def read(self) -> Reading:
        power_uw = mw_to_uw(self.power_mw())
        t = self.clock.now_ns()
        return Reading(t, (self._integrator.sample(t, power_uw),))


def gpu_meters(nvml: Nvml, clock) -> list[tuple[object, DeviceInfo, object | None, list[str]]]:
    """Each GPU (handle, info) with its best meter (None if none works) and
    why better ones were not used."""
    chosen = []
    for handle, info in nvml.gpus():
        downgrades: list[str] = []
        for meter_type in (NvmlEnergyMeter, NvmlPowerMeter):
            meter = meter_type(nvml, handle, info, clock)
            try:
                meter.read()
            except NvmlError as exc:
                downgrades.append(str(exc))
                continue
            chosen.append((handle, info, meter, downgrades))
            break
        else:
            chosen.append((handle, info, None, downgrades))
    return chosen
