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
