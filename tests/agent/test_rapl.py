"""RAPL over a fake powercap tree: which zones count, wraps, unreadable counters."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.config import Config, Meters
from agent.counters import Counter
from agent.meters import rapl
from agent.meters.select import select
from protos.energy import Grade


@pytest.fixture
def powercap(tmp_path, kit):
    """Two packages with core/uncore/dram subzones, psys, and an mmio duplicate."""
    z = kit.make_zone
    z(tmp_path, "intel-rapl:0", "package-0", 1000)
    z(tmp_path, "intel-rapl:0/intel-rapl:0:0", "core", 500)
    z(tmp_path, "intel-rapl:0/intel-rapl:0:1", "uncore", 100)
    z(tmp_path, "intel-rapl:0/intel-rapl:0:2", "dram", 300, max_range=65712999613)
    z(tmp_path, "intel-rapl:1", "package-1", 2000)
    z(tmp_path, "intel-rapl:2", "psys", 9000)
    z(tmp_path, "intel-rapl-mmio:0", "package-0", 1000)
    # sysfs lists subzones both nested and flat; mirror the flat links
    for sub in (tmp_path / "intel-rapl:0").glob("intel-rapl:0:*"):
        os.symlink(sub, tmp_path / sub.name)
    return tmp_path


def test_packages_take_package_and_dram_only(powercap):
    found = {pkg: [z.name for z in zones] for pkg, zones in rapl.packages(powercap)}
    assert found == {"0": ["intel-rapl:0", "intel-rapl:0:2"], "1": ["intel-rapl:1"]}


def test_meter_reads_both_counters_with_their_own_ranges(powercap, kit):
    meters, problems = rapl.cpu_meters(powercap, kit.StepClock())
    assert problems == [] and [m.device.device_id for m in meters] == ["cpu:0", "cpu:1"]
    pkg0 = meters[0]
    assert pkg0.grade is Grade.HwShunt and pkg0.max_ranges_uj == (262143328850, 65712999613)
    assert pkg0.read().counters_uj == (1000, 300)
    assert pkg0.max_read_gap_ns() > 1_000_000_000  # 1 s windows cannot miss a wrap


def test_package_wrap_is_corrected_with_max_energy_range(powercap, kit):
    clock = kit.StepClock()
    meter = rapl.cpu_meters(powercap, clock)[0][0]
    zone = powercap / "intel-rapl:0"
    (zone / "energy_uj").write_text("262143328000\n")
    counter = Counter(meter.grade, meter.max_ranges_uj, None)
    counter.step(0, meter.read())
    (zone / "energy_uj").write_text("150\n")
    clock.t = 1_000_000_000
    assert counter.step(clock.t, meter.read()).uj == 262143328850 - 262143328000 + 150


def test_unreadable_energy_is_a_clear_error_not_zero(powercap, kit, monkeypatch):
    denied = powercap / "intel-rapl:1" / "energy_uj"
    read_text = Path.read_text

    def as_unprivileged(path, *args, **kwargs):  # root would read a 0400 file anyway
        if path == denied:
            raise PermissionError(13, "Permission denied")
        return read_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", as_unprivileged)
    meters, problems = rapl.cpu_meters(powercap, kit.StepClock())
    assert [m.device.device_id for m in meters] == ["cpu:0"]
    assert "CVE-2020-8694" in problems[0] and "CAP_DAC_READ_SEARCH" in problems[0]


def test_garbage_in_energy_is_an_error(powercap, kit):
    meter = rapl.cpu_meters(powercap, kit.StepClock())[0][0]
    (powercap / "intel-rapl:0" / "energy_uj").write_text("oops\n")
    with pytest.raises(rapl.RaplError, match="not a counter"):
        meter.read()


def test_absent_powercap_falls_back_to_estimator_only_when_configured(tmp_path, kit):
    from agent.config import Estimator
    cfg = Config(meters=Meters(nvml=False, rapl_root=tmp_path / "none"))
    (cpu,) = select(cfg, kit.StepClock()).choices
    assert cpu.meter is None and "absent" in cpu.downgrades[0]
    cfg = Config(meters=Meters(nvml=False, rapl_root=tmp_path / "none"), estimator=Estimator(cpu_watts=200))
    (cpu,) = select(cfg, kit.StepClock()).choices
    assert cpu.meter.grade is Grade.Estimator and "absent" in cpu.downgrades[0]
