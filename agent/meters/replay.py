"""A recorded trace played back as a meter, for demos, tests and post-mortems.

The CSV needs `t_mono_ns` and `energy_mj` (a total-energy counter, graded
HwShunt as recorded) or, failing that, `power_instant_mw` (integrated,
ModelBased). Other columns are ignored. An empty energy cell is a missing
reading. Reading at time t returns the last row at or before t, exactly what
a live counter read at t would have said, timed by that row (as NVML times a
field value by its sample).

With an origin (`--replay-origin-unix-ns`), the trace plays on the wall clock
from that instant whichever process reads it, so a counter keeps running
while the agent is down, as a real one does. A simulated driver reload
(`--replay-reload-at-ms`, from the trace's first row) restarts the counter
from 0 there, in a new epoch, as a real reload does.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from agent.clock import ReplayClock
from agent.meters.base import COUNTER_UPDATE_NS, GPU, DeviceInfo, Integrator, MeterError, Reading
from protos.energy import Grade, mj_to_uj, mw_to_uw
from protos.pool.v1 import types_pb2

BUNDLED_TRACE = "phases-10ms.csv"
# Twice the 700 W limit of the H200 the bundled trace was recorded on.
REPLAY_MAX_POWER_UW = 1_400_000_000


def bundled_trace() -> Path:
    """The H200 trace shipped in the wheel (agent/data/)."""
    return Path(str(resources.files("agent") / "data" / BUNDLED_TRACE))


class TraceError(ValueError):
    """A trace that cannot be replayed; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class Row:
    t_ns: int
    value: int | None   # energy in µJ, or power in µW when replaying power


def load_trace(path: Path) -> tuple[list[Row], bool]:
    """Rows in time order, and whether they carry energy (else power)."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            columns = reader.fieldnames or []
            if "t_mono_ns" not in columns:
                raise TraceError(f"{path}: no t_mono_ns column (found {', '.join(columns) or 'nothing'})")
            energy = "energy_mj" in columns
            if not energy and "power_instant_mw" not in columns:
                raise TraceError(f"{path}: needs an energy_mj or a power_instant_mw column")
            rows = [_row(path, reader.line_num, r, energy) for r in reader]
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror}") from None
    if len(rows) < 2:
        raise TraceError(f"{path}: fewer than two rows, nothing to measure")
    return rows, energy


def _row(path: Path, line: int, r: dict, energy: bool) -> Row:
    cell = (r["energy_mj"] if energy else r["power_instant_mw"]) or ""
    try:
        t_ns = int(r["t_mono_ns"])
        value = None if not cell.strip() else int(cell)
    except (TypeError, ValueError):
        raise TraceError(f"{path}:{line}: not an integer row: {r}") from None
    if value is not None and value < 0:
        raise TraceError(f"{path}:{line}: negative value {value}")
    return Row(t_ns, value if value is None else (mj_to_uj(value) if energy else mw_to_uw(value)))


class ReplayMeter:
    max_ranges_uj = (None,)   # a recorded NVML counter: no known range
    meter_kind = types_pb2.REPLAY
    poll_ns = None            # every row is a sample; the clock says how far to go

    max_power_uw = REPLAY_MAX_POWER_UW

    def __init__(self, path: Path, speed: float = 0.0, device_id: str | None = None, *,
                 origin_unix_ns: int | None = None, reload_at_ns: int | None = None):
        self.rows, self._energy = load_trace(path)
        # the trace's own time drives the sampler
        self.clock = ReplayClock(self.rows[0].t_ns, speed, origin_unix_ns, self.rows[-1].t_ns - self.rows[0].t_ns)
        self._reload = None if reload_at_ns is None else self.rows[0].t_ns + reload_at_ns
        self._base = 0 if self._reload is None else next(
            (r.value for r in reversed(self.rows) if r.t_ns <= self._reload and r.value is not None), 0)
        # a trace replayed from its own origin is one counter epoch, in every process that replays it
        self.identity = None if not self._energy else f"replay:{path.name}:origin={self.clock.unix_offset_ns}"
        self._next = 0
        self._last: Row | None = None
        self._power = None if self._energy else Integrator()
        self._total_uj = 0
        self.grade = Grade.HwShunt if self._energy else Grade.ModelBased
        self.device = DeviceInfo(device_id or f"replay:{path.stem}", GPU, "replay")
        self.start_ns, self.end_ns = self.rows[0].t_ns, self.rows[-1].t_ns
        self.update_ns = COUNTER_UPDATE_NS

    def read(self) -> Reading:
        now = self.clock.now_ns()
        while self._next < len(self.rows) and self.rows[self._next].t_ns <= now:
            self._advance(self.rows[self._next])
            self._next += 1
        row = self._last
        if row is None or row.value is None:
            raise MeterError(f"trace has no value at or before t={now} ns")
        unix = row.t_ns + self.clock.unix_offset_ns   # the row's own time, as NVML stamps a sample
        if not self._energy:
            return Reading(row.t_ns, (self._total_uj,), unix_ns=unix)
        if self._reload is not None and row.t_ns > self._reload:
            return Reading(row.t_ns, (row.value - self._base,), epoch=1, unix_ns=unix)   # the driver reloaded: from 0
        return Reading(row.t_ns, (row.value,), unix_ns=unix)

    def _advance(self, row: Row) -> None:
        self._last = row
        if self._power is not None and row.value is not None:
            self._total_uj = self._power.sample(row.t_ns, row.value)
