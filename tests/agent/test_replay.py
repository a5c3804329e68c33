"""The bundled H200 trace, replayed: exact conservation and the fixture's phase means."""

from __future__ import annotations

import csv
import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent.meters.replay import ReplayMeter
from agent.sampler import Sampler
from agent.windows import Sequencer
from protos.energy import Grade

# fixtures/nvml-h200/README.md: phase → (counter delta µJ, mean W)
PHASES = {
    "idle0": (630270000, 78.8),
    "start_compute": (10826801000, 537.9),
    "after_compute": (683295000, 85.5),
    "start_memory": (4495553000, 314.6),
    "after_memory": (677430000, 84.7),
    "start_parked": (1529160000, 112.9),
    "after_parked": (723328000, 90.3),
}


def _energy_at(meter, t_ns: int) -> int:
    return next(r.value for r in meter.rows if r.t_ns == t_ns)


def test_bundled_trace_ships_in_the_package(kit):
    TRACE = kit.trace
    assert TRACE.is_file() and TRACE.parent.name == "data" and TRACE.parent.parent.name == "agent"


def test_windows_sum_exactly_to_the_counter_delta_they_cover(kit):
    windows, meter, clock = kit.replay()
    assert len(windows) == 80  # 79.9 s of trace: 79 whole windows and the tail
    assert [w.seq for w in windows] == list(range(1, len(windows) + 1))
    for before, after in zip(windows, windows[1:]):
        assert after.start_ns == before.end_ns  # contiguous: one boundary reading each
    first = windows[0].start_ns - clock.unix_offset_ns
    last = windows[-1].end_ns - clock.unix_offset_ns
    assert sum(w.uj for w in windows) == _energy_at(meter, last) - _energy_at(meter, first)
    assert all(w.grade is Grade.HwShunt and w.uj > 0 for w in windows)
    for w in windows:  # never shorter than the counter's update period
        assert w.end_ns - w.start_ns >= 100_000_000


def _phase_trace(trace: Path, tmp_path: Path, phase: str) -> Path:
    with open(trace, newline="") as src:
        reader = csv.DictReader(src)
        rows = [r for r in reader if r["phase"] == phase]
    out = tmp_path / f"{phase}.csv"
    with open(out, "w", newline="") as dst:
        writer = csv.DictWriter(dst, fieldnames=reader.fieldnames)
        writer.writeheader()
        writer.writerows(rows)
    return out


@pytest.mark.parametrize("phase", PHASES)
def test_each_phase_mean_power_within_one_percent_of_the_fixture(kit, tmp_path, phase):
    windows, meter, clock = kit.replay(_phase_trace(kit.trace, tmp_path, phase))
    uj = sum(w.uj for w in windows)
    ns = windows[-1].end_ns - windows[0].start_ns
    delta_uj, mean_w = PHASES[phase]
    first, last = (t - clock.unix_offset_ns for t in (windows[0].start_ns, windows[-1].end_ns))
    assert uj == _energy_at(meter, last) - _energy_at(meter, first)
    assert uj <= delta_uj
    assert uj * 1000 / ns == pytest.approx(mean_w, rel=0.01)


def test_power_instant_integration_agrees_with_the_counter_within_one_percent(kit, tmp_path):
    power_only = tmp_path / "power.csv"
    with open(kit.trace, newline="") as src, open(power_only, "w", newline="") as dst:
        writer = csv.writer(dst)
        writer.writerow(["t_mono_ns", "power_instant_mw"])
        writer.writerows((r["t_mono_ns"], r["power_instant_mw"]) for r in csv.DictReader(src))
    modelled, _, _ = kit.replay(power_only)
    measured, _, _ = kit.replay()
    assert all(w.grade is Grade.ModelBased for w in modelled)
    assert sum(w.uj for w in modelled) == pytest.approx(sum(w.uj for w in measured), rel=0.01)


def test_an_empty_energy_cell_is_a_missing_reading_not_zero(kit, tmp_path):
    holed = tmp_path / "holed.csv"
    lines = kit.trace.read_text().splitlines()
    header = lines[0].split(",")
    col = header.index("energy_mj")
    for target in range(250, 280):  # 300 ms without a value: boundary reads land in it
        cells = lines[target].split(",")
        cells[col] = ""
        lines[target] = ",".join(cells)
    holed.write_text("\n".join(lines[:400]) + "\n")
    windows, _, _ = kit.replay(holed, window_ms=100)
    gaps = [w for w in windows if w.uj is None]
    assert gaps and all(w.mean_uw is None and w.gap for w in gaps)
    assert all(w.uj > 0 for w in windows if w.uj is not None)


@pytest.mark.slow
def test_pool_agent_replay_stdout_as_a_real_process(kit):
    exe = Path(sys.executable).with_name("pool-agent")
    done = subprocess.run([str(exe), "--replay", str(kit.trace), "--replay-speed", "0", "--window-ms", "1000",
                           "--stdout"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    windows, _, _ = kit.replay()
    assert len(lines) == len(windows)
    assert set(lines[0]) == {"device", "seq", "start_ns", "end_ns", "uj", "grade", "mean_uw"}
    assert [x["uj"] for x in lines] == [w.uj for w in windows]
    assert {x["grade"] for x in lines} == {"HwShunt"}


@pytest.mark.slow
def test_pool_agent_stdout_sigkilled_and_restarted_prints_every_window_once_tiled(kit, tmp_path):
    """What the real-GPU check does (`pool-agent --stdout`, SIGKILL, restart),
    on the replayed counter: the printed windows tile time, each seq once,
    and sum to the counter's delta."""
    exe = Path(sys.executable).with_name("pool-agent")
    config = tmp_path / "agent.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n')
    origin = time.time_ns() - 30 * 10**9   # 30 s into the trace: a downtime of seconds is provable
    lines = []
    for life in range(3):
        process = subprocess.Popen([str(exe), "--config", str(config), "--replay", str(kit.trace), "--replay-speed",
                                    "1", "--replay-origin-unix-ns", str(origin), "--window-ms", "500", "--stdout"],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        printed: queue.Queue = queue.Queue()
        reader = threading.Thread(target=lambda: [printed.put(line) for line in process.stdout], daemon=True)
        reader.start()
        for _ in range(2 + life):   # killed while it prints on (a loaded host starts it slowly: no fixed sleep)
            lines.append(json.loads(printed.get(timeout=60)))
        # killed mid-window, half a window after a print, not in the instant between printing a
        # window and marking it printed in the spool (a kill there prints that window again)
        time.sleep(0.25)
        process.kill()
        process.wait(timeout=10)
        reader.join(timeout=10)
        while not printed.empty():
            lines.append(json.loads(printed.get()))
        time.sleep(0.4)   # a downtime between lives, which the counter's continuity must cover
    assert [x["seq"] for x in lines] == list(range(1, len(lines) + 1)) and len(lines) >= 9
    assert all(b["start_ns"] == a["end_ns"] for a, b in zip(lines, lines[1:]))
    assert all(x["uj"] is not None for x in lines)
    rows = kit.replay_rows
    offset = origin - rows[0].t_ns

    def counter(t):
        return next(r.value for r in reversed(rows) if r.t_ns <= t - offset)
    assert sum(x["uj"] for x in lines) == counter(lines[-1]["end_ns"]) - counter(lines[0]["start_ns"])


def test_real_time_replay_paces_itself(kit, tmp_path):
    started = time.monotonic()
    windows, _, _ = kit.replay(_phase_trace(kit.trace, tmp_path, "idle0"), window_ms=1000, speed=40.0)
    # 7.99 s: seven whole windows and the tail; a host too loaded to wake at a
    # boundary merges it into a longer window (see the late-wake test), never more
    assert 1 <= len(windows) <= 8
    assert all(b.start_ns == a.end_ns for a, b in zip(windows, windows[1:]))
    assert 7.9e9 <= windows[-1].end_ns - windows[0].start_ns <= 8.0e9
    assert time.monotonic() - started >= 7.9 / 40


def test_a_trace_without_the_columns_is_refused(tmp_path):
    from agent.meters.replay import TraceError, load_trace
    bad = tmp_path / "bad.csv"
    bad.write_text("time,energy\n1,2\n")
    with pytest.raises(TraceError, match="t_mono_ns"):
        load_trace(bad)


def test_a_late_wake_makes_one_longer_window_and_loses_no_energy(kit):
    """A host too busy to wake at a boundary (the agent stalled 2.5 windows)
    closes one window at the reading it takes when it does wake: the missed
    boundaries are merged, never made up (a counter cannot be read in the
    past), so there are fewer windows, still tiled, summing exactly to the
    counter delta they cover. This is why a real-time replay on a loaded
    host may make fewer windows than the as-fast-as-possible reference."""
    steady, _, steady_clock = kit.replay()
    meter = ReplayMeter(kit.trace, 0.0)
    clock, stalled_at = meter.clock, meter.rows[0].t_ns + 10_000_000_000
    sleep_until = clock.sleep_until
    clock.sleep_until = lambda t, stop: sleep_until(t + 2_500_000_000 if t == stalled_at else t, stop)
    windows = []
    Sampler([meter], clock, 1_000_000_000, Sequencer(), windows.extend, stall_ns=500_000_000,
            end_ns=meter.end_ns).run(threading.Event())
    assert len(windows) == len(steady) - 2
    assert [w.seq for w in windows] == list(range(1, len(windows) + 1))
    assert all(after.start_ns == before.end_ns for before, after in zip(windows, windows[1:]))
    assert max(w.end_ns - w.start_ns for w in windows) >= 3_500_000_000   # the stall, in one window
    first, last = windows[0].start_ns - clock.unix_offset_ns, windows[-1].end_ns - clock.unix_offset_ns
    assert first == steady[0].start_ns - steady_clock.unix_offset_ns
    assert sum(w.uj for w in windows) == _energy_at(meter, last) - _energy_at(meter, first)
