"""Choose each device's meter in grade order (RULES §1) and say why better
ones were not available: NVML energy → NVML POWER_INSTANT → estimator for
GPUs; RAPL → estimator for CPU packages."""

from __future__ import annotations

from dataclasses import dataclass, field

import psutil

from agent.meters import nvml as nvml_meters
from agent.meters import rapl
from agent.meters.base import CPU_PACKAGE, DeviceInfo, Meter, MeterError
from agent.meters.estimator import EstimatorMeter


@dataclass
class Choice:
    device: DeviceInfo
    meter: Meter | None
    downgrades: list[str] = field(default_factory=list)


@dataclass
class Selection:
    choices: list[Choice]
    nvml: nvml_meters.Nvml | None = None
    host_notes: list[str] = field(default_factory=list)  # devices we could not even enumerate

    @property
    def meters(self) -> list[Meter]:
        return [c.meter for c in self.choices if c.meter is not None]


def select(config, clock, nvml_module=None, driver_sysfs=nvml_meters.DRIVER_SYSFS) -> Selection:
    selection = Selection([])
    if config.meters.nvml:
        _gpus(selection, config, clock, nvml_module, driver_sysfs)
    else:
        selection.host_notes.append("NVML: disabled in configuration (meters.nvml = false)")
    _cpus(selection, config, clock)
    return selection


def _gpus(selection: Selection, config, clock, nvml_module, driver_sysfs) -> None:
    try:
        selection.nvml = nvml = nvml_meters.Nvml(nvml_module, driver_sysfs)
        found = nvml_meters.gpu_meters(nvml, clock)
    except MeterError as exc:
        selection.host_notes.append(f"no GPUs metered: {exc}")
        return
    watts = config.estimator.gpu_watts
    for handle, info, meter, downgrades in found:
        if meter is None and watts:
            meter = EstimatorMeter(info, watts, _gpu_utilisation(nvml, handle), clock)
        elif meter is None:
            downgrades.append("estimator: not configured (estimator.gpu_watts)")
        selection.choices.append(Choice(info, meter, downgrades))


def _gpu_utilisation(nvml: nvml_meters.Nvml, handle):
    return lambda: nvml.call(nvml.m.nvmlDeviceGetUtilizationRates, handle, what="utilisation").gpu


def _cpus(selection: Selection, config, clock) -> None:
    meters, problems = rapl.cpu_meters(config.meters.rapl_root, clock) if config.meters.rapl else (
        [], ["RAPL: disabled in configuration (meters.rapl = false)"])
    for meter in meters:
        selection.choices.append(Choice(meter.device, meter))
        if meter.max_read_gap_ns() < config.window_ns:
            selection.host_notes.append(f"RAPL {meter.device.device_id}: window_ms {config.window_ms} is long "
                                        "enough for a zone to wrap twice unseen; shorten it")
    if meters:
        selection.host_notes.extend(problems)
        return
    device = DeviceInfo("cpu:0", CPU_PACKAGE, "cpu")
    watts = config.estimator.cpu_watts
    if watts:
        psutil.cpu_percent(None)  # primes psutil's interval-less measurement
        selection.choices.append(Choice(device, EstimatorMeter(device, watts, lambda: psutil.cpu_percent(None),
                                                               clock), problems))
    else:
        selection.choices.append(Choice(device, None, [*problems, "estimator: not configured (estimator.cpu_watts)"]))
