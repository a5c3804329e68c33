"""CPU packages through the powercap sysfs (Intel and AMD RAPL).

One device per package: its `package-N` zone plus its `dram` subzone, each a
counter with its own `max_energy_range_uj` (the counters module unwraps them
separately). Never `core`/`uncore` (inside the package) nor `psys` (contains
it), and `intel-rapl-mmio` zones are duplicates of the MSR ones (RULES §1).

`energy_uj` is root-only since CVE-2020-8694; the shipped unit grants
CAP_DAC_READ_SEARCH. An unreadable counter is an error, never a 0.
"""

from __future__ import annotations

from pathlib import Path

from agent.meters.base import CPU_PACKAGE, DeviceInfo, MeterError, Reading, boot_id
from protos.energy import Grade
from protos.pool.v1 import types_pb2

DEFAULT_ROOT = Path("/sys/class/powercap")
# A CPU package draws well under this; a zone's range must not wrap twice
# between two reads at this power, or a wrap would go unseen.
MAX_PLAUSIBLE_UW = 2_000_000_000


class RaplError(MeterError):
    pass


def _read_int(path: Path) -> int:
    try:
        text = path.read_text().strip()
    except PermissionError:
        raise RaplError(f"RAPL: {path} is readable only by root (CVE-2020-8694): run pool-agent with "
                        "CAP_DAC_READ_SEARCH, as the shipped systemd unit does") from None
    except OSError as exc:
        raise RaplError(f"RAPL: cannot read {path}: {exc.strerror}") from None
    if not text.isdigit():
        raise RaplError(f"RAPL: {path} holds {text[:40]!r}, not a counter")
    return int(text)


def _name(zone: Path) -> str:
    try:
        return (zone / "name").read_text().strip()
    except OSError:
        return ""


def packages(root: Path = DEFAULT_ROOT) -> list[tuple[str, list[Path]]]:
    """(package index, [package zone, dram zones…]) from the MSR interface only."""
    found = []
    for zone in sorted(root.glob("intel-rapl:*")):
        if zone.name.count(":") != 1 or not _name(zone).startswith("package-"):
            continue  # subzones are taken with their package; psys is never taken
        drams = [sub for sub in sorted(zone.glob(f"{zone.name}:*")) if _name(sub) == "dram"]
        found.append((_name(zone).removeprefix("package-"), [zone, *drams]))
    return found


class RaplMeter:
    meter_kind = types_pb2.RAPL
    grade = Grade.HwShunt
    poll_ns = None
    update_ns = 1_000_000  # RAPL updates about every ms

    def __init__(self, package: str, zones: list[Path], clock):
        self.device = DeviceInfo(f"cpu:{package}", CPU_PACKAGE, "cpu")
        self.zones, self.clock = zones, clock
        self.max_ranges_uj = tuple(_read_int(z / "max_energy_range_uj") for z in zones)
        # RAPL counters run from boot: the boot is their epoch (a wrap in a
        # downtime is ruled out, or not, by max_power_uw in agent.counters).
        boot = boot_id()
        self.identity = f"rapl:{package}:boot={boot}" if boot else None
        self.max_power_uw = MAX_PLAUSIBLE_UW

    def read(self) -> Reading:
        values = tuple(_read_int(z / "energy_uj") for z in self.zones)
        return Reading(self.clock.now_ns(), values)

    def max_read_gap_ns(self) -> int:
        """Reads further apart than this could miss a whole wrap."""
        return min(self.max_ranges_uj) * 1_000_000_000 // MAX_PLAUSIBLE_UW


def cpu_meters(root: Path, clock) -> tuple[list[RaplMeter], list[str]]:
    """Readable package meters, or none and why."""
    if not root.is_dir():
        return [], [f"RAPL: {root} absent (no powercap driver, or a VM without RAPL)"]
    meters, problems = [], []
    for package, zones in packages(root):
        try:
            meter = RaplMeter(package, zones, clock)
            meter.read()
        except RaplError as exc:
            problems.append(str(exc))
            continue
        meters.append(meter)
    if not meters and not problems:
        problems.append(f"RAPL: no package zones under {root}")
    return meters, problems
