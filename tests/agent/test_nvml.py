"""NVML behind a fake pynvml, and the contract that keeps the fake honest."""

from __future__ import annotations

import inspect
import threading

import pynvml
import pytest

from agent.config import Config, Estimator, Meters
from agent.meters import nvml
from agent.meters.select import select
from agent.sampler import Sampler
from agent.windows import Sequencer
from protos.energy import Grade

S = 1_000_000_000
from protos.pool.v1 import types_pb2

USED_FUNCTIONS = [name for name in dir(pynvml) if name.startswith("nvml")]


def _fake_functions(fake):
    return [name for name in dir(fake) if name.startswith("nvml")]


def test_contract_every_faked_function_exists_in_pynvml_with_the_same_parameters(fake_nvml):
    for name in _fake_functions(fake_nvml):
        assert name in USED_FUNCTIONS, f"pynvml has no {name}"
        real = list(inspect.signature(getattr(pynvml, name)).parameters)
        fake = list(inspect.signature(getattr(fake_nvml, name)).parameters)
        assert fake == real, f"{name}: fake takes {fake}, pynvml takes {real}"


def test_contract_constants_and_error_classes_match_pynvml(fake_nvml):
    for name in [n for n in dir(fake_nvml) if n.startswith("NVML_")]:
        assert getattr(fake_nvml, name) == getattr(pynvml, name), name
    for code, cls in [(9, "NVMLError_DriverNotLoaded"), (12, "NVMLError_LibraryNotFound"),
                      (3, "NVMLError_NotSupported"), (15, "NVMLError_GpuIsLost")]:
        real = pynvml.NVMLError(code)
        assert type(real).__name__ == cls and issubclass(type(real), pynvml.NVMLError)
        assert real.value == fake_nvml.NVMLError(code).value
        # the agent maps the real error and the fake one alike
        assert type(nvml.typed_error(pynvml, real, "x")) is type(nvml.typed_error(fake_nvml, fake_nvml.NVMLError(code), "x"))


def test_contract_the_agent_calls_only_what_the_fake_provides(fake_nvml):
    source = inspect.getsource(nvml) + inspect.getsource(select)
    called = {w for w in USED_FUNCTIONS if f".{w}" in source}
    assert called <= set(_fake_functions(fake_nvml))


def test_real_pynvml_without_a_gpu_is_a_typed_no_driver_error():
    try:
        nvml.Nvml(pynvml).shutdown()
    except nvml.NvmlNoDriver as exc:
        assert "no driver" in str(exc)
    else:
        pytest.skip("this machine has an NVIDIA driver")


@pytest.mark.parametrize("code, error", [(9, nvml.NvmlNoDriver), (12, nvml.NvmlNoDriver),
                                         (3, nvml.NvmlNotSupported), (15, nvml.NvmlGpuLost),
                                         (999, nvml.NvmlError)])
def test_errors_map_to_types_with_clear_messages(fake_nvml, code, error):
    mapped = nvml.typed_error(fake_nvml, fake_nvml.NVMLError(code), "total energy")
    assert type(mapped) is error and "NVML" in str(mapped) and "total energy" in str(mapped)


def _config(**estimator):
    return Config(meters=Meters(rapl=False), estimator=Estimator(**estimator))


def test_energy_counter_is_chosen_first_and_describes_the_gpu(kit, fake_nvml):
    selection = select(_config(), kit.StepClock(), fake_nvml)
    gpu = selection.choices[0]
    assert isinstance(gpu.meter, nvml.NvmlEnergyMeter) and gpu.meter.grade is Grade.HwShunt
    assert gpu.device.device_type == "NVIDIA H200" and gpu.device.memory_bytes == 150754820096
    assert gpu.device.device_id.startswith("GPU-") and gpu.downgrades == []
    assert gpu.meter.read().counters_uj == (1_000_000_000,)  # mJ → µJ


def test_power_instant_only_where_the_counter_is_missing(kit, fake_nvml):
    fake_nvml.gpus[0].energy_error = fake_nvml.NVML_ERROR_NOT_SUPPORTED
    clock = kit.StepClock()
    gpu = select(_config(), clock, fake_nvml).choices[0]
    assert isinstance(gpu.meter, nvml.NvmlPowerMeter) and gpu.meter.grade is Grade.ModelBased
    assert "not supported" in gpu.downgrades[0]
    clock.t += 1_000_000_000
    assert gpu.meter.read().counters_uj == (80_000_000,)  # 80 W for 1 s


def test_estimator_only_when_configured_never_a_silent_zero(kit, fake_nvml):
    gpu = fake_nvml.gpus[0]
    gpu.energy_error = gpu.power_error = fake_nvml.NVML_ERROR_NOT_SUPPORTED
    unconfigured = select(_config(), kit.StepClock(), fake_nvml).choices[0]
    assert unconfigured.meter is None and "estimator: not configured" in unconfigured.downgrades[-1]
    clock = kit.StepClock()
    estimated = select(_config(gpu_watts=400), clock, fake_nvml).choices[0]
    assert estimated.meter.grade is Grade.Estimator
    estimated.meter.read()  # the first read is the baseline
    clock.t += 1_000_000_000
    assert estimated.meter.read().counters_uj == (200_000_000,)  # 400 W × 50 % for 1 s


def test_mig_mode_and_gpus_without_mig(kit, fake_nvml):
    fake_nvml.gpus = [kit.FakeGpu(mig=1), kit.FakeGpu(uuid="GPU-2", mig_error=fake_nvml.NVML_ERROR_NOT_SUPPORTED)]
    devices = [c.device for c in select(_config(), kit.StepClock(), fake_nvml).choices
               if c.device.kind == types_pb2.GPU]
    assert [d.mig_enabled for d in devices] == [True, False]


def test_no_driver_means_no_gpu_and_says_why(kit, fake_nvml):
    fake_nvml.init_error = fake_nvml.NVML_ERROR_DRIVER_NOT_LOADED
    selection = select(_config(), kit.StepClock(), fake_nvml)
    assert selection.choices == [c for c in selection.choices if c.device.kind != types_pb2.GPU]
    assert any("no driver" in note for note in selection.host_notes)


def test_counter_is_read_once_per_window_boundary(kit, fake_nvml):
    clock = kit.StepClock()
    meter = select(_config(), clock, fake_nvml).meters[0]
    fake_nvml.energy_reads = 0
    windows = []
    Sampler([meter], clock, 1_000_000_000, Sequencer(), windows.extend, end_ns=10_000_000_000).run(threading.Event())
    assert len(windows) == 10 and fake_nvml.energy_reads == 11  # one read per boundary, no more


def test_lost_gpu_mid_run_is_a_gap_not_zero(kit, fake_nvml):
    clock = kit.StepClock()
    meter = select(_config(), clock, fake_nvml).meters[0]
    gpu, windows = fake_nvml.gpus[0], []
    sampler = Sampler([meter], clock, 1_000_000_000, Sequencer(), windows.extend)
    sampler._close(clock.t)
    for step, lost in enumerate([False, True, False]):
        clock.t += 1_000_000_000
        gpu.energy_mj += 100
        gpu.energy_error = fake_nvml.NVML_ERROR_GPU_IS_LOST if lost else None
        windows += sampler._close(clock.t)
    assert [w.uj for w in windows] == [100_000, None, None]


def test_contract_the_fake_field_value_has_the_real_structures_fields(kit):
    real = [name for name, _ in pynvml.c_nvmlFieldValue_t._fields_]
    fake = kit.FakeFieldValue(83, 0, 3, 1)
    assert sorted(vars(fake)) == sorted(real)
    assert {"timestamp", "latencyUsec", "valueType", "nvmlReturn"} <= set(real)
    union = {name for name, _ in pynvml.c_nvmlValue_t._fields_}
    assert set(vars(fake.value)) <= union and "ullVal" in union


def test_contract_a_real_field_value_reads_as_the_agent_reads_it():
    """The real ctypes structure, filled as the driver fills it, through the meter's read."""
    value = pynvml.c_nvmlFieldValue_t()
    value.fieldId, value.timestamp, value.valueType = pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, 1796078347287800, 3
    value.nvmlReturn, value.value.ullVal = pynvml.NVML_SUCCESS, 2360818
    assert (value.timestamp * 1000, value.value.ullVal, value.valueType) == (1796078347287800000, 2360818,
                                                                            pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG)


def _wall_clock(kit, t_ns: int, unix_ns: int):
    clock = kit.StepClock(t_ns)
    clock.unix_offset_ns = unix_ns - t_ns
    return clock


def test_the_counter_is_timed_by_its_fields_own_timestamp(kit, fake_nvml):
    """The counter moved 40 ms before it was read: the reading (and so the
    window edge) sits where it moved, in both clocks."""
    unix = 1796078347_000_000_000
    clock = _wall_clock(kit, 50 * S, unix)
    meter = select(_config(), clock, fake_nvml).meters[0]
    fake_nvml.gpus[0].energy_sample_us = (unix - 40_000_000) // 1000
    reading = meter.read()
    assert reading.t_ns == 50 * S - 40_000_000 and reading.unix_ns == unix - 40_000_000
    assert reading.counters_uj == (1_000_000_000,)


def test_a_missing_or_implausible_timestamp_falls_back_to_the_read_time(kit, fake_nvml):
    unix = 1796078347_000_000_000
    clock = _wall_clock(kit, 50 * S, unix)
    meter = select(_config(), clock, fake_nvml).meters[0]
    for stamp_us in (0, (unix + 5 * S) // 1000, (unix - 30 * S) // 1000):   # none, future, stale
        fake_nvml.gpus[0].energy_sample_us = stamp_us
        reading = meter.read()
        assert (reading.t_ns, reading.unix_ns) == (50 * S, unix)


def test_windows_edges_follow_the_samples_and_tile(kit, fake_nvml):
    unix = 1796078347_000_000_000
    clock = _wall_clock(kit, 0, unix)
    meter = select(_config(), clock, fake_nvml).meters[0]
    gpu, windows = fake_nvml.gpus[0], []
    sampler = Sampler([meter], clock, S, Sequencer(), windows.extend)
    for k, age_ms in enumerate([0, 30, 90, 10]):
        clock.t = k * S
        gpu.energy_mj += 100
        gpu.energy_sample_us = (unix + k * S - age_ms * 1_000_000) // 1000
        windows += sampler._close(clock.t)
    edges = [(w.start_ns - unix, w.end_ns - unix) for w in windows]
    assert edges == [(0, S - 30_000_000), (S - 30_000_000, 2 * S - 90_000_000), (2 * S - 90_000_000, 3 * S - 10_000_000)]
    assert windows[1].mean_uw == 100_000 * S // (S - 60_000_000)   # over the samples' own interval


def test_the_counters_epoch_names_gpu_driver_load_and_boot(kit, fake_nvml, tmp_path):
    driver = tmp_path / "nvidia"
    driver.mkdir()
    meter = select(_config(), kit.StepClock(), fake_nvml, driver_sysfs=driver).meters[0]
    assert meter.identity.startswith(f"nvml:{fake_nvml.gpus[0].uuid}:driver=580.159.04:load={driver.stat().st_ino}")
    assert meter.max_power_uw == 2 * 700_000_000
    unknown = select(_config(), kit.StepClock(), fake_nvml, driver_sysfs=tmp_path / "absent").meters[0]
    assert unknown.identity is None   # no proof of the driver load: no continuity across restarts
