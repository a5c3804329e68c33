"""pool-agent loses nothing: SIGKILLed at random moments and restarted after
random delays, with the scheduler killed too in between, against a real
scheduler, replaying the H200 trace on the wall clock (the counter runs on
while the agent is down). Every second of the device is then a figure or a
named gap, and the figures are the counter's delta, to the µJ."""

from __future__ import annotations

import random
import time
import urllib.request

import pytest

from agent.meters.replay import bundled_trace, load_trace
from .conftest import free_port, wait_for

pytestmark = pytest.mark.slow
HOST = "fault-host"
DEVICE = "replay:phases-10ms"
ROWS, _ = load_trace(bundled_trace())


def counter_at(t_trace: int) -> int:
    """The trace's counter (µJ) as a read at trace time t would see it."""
    value = None
    for row in ROWS:
        if row.t_ns > t_trace:
            break
        value = row.value
    assert value is not None
    return value


def agent_args(origin: int, *more: str) -> tuple:
    return ("--replay-origin-unix-ns", str(origin), "--window-ms", "500", *more)


def device_windows(s) -> tuple[list[tuple[int, int, int | None, str]], dict]:
    """The device's windows as the scheduler holds them, in time order:
    (start, end, µJ or None, gap reason or "")."""
    doc = s.json("splits", "--device", DEVICE)
    figures: dict[tuple[int, int], int] = {}
    for r in doc["rows"]:
        figures[r["start_ns"], r["end_ns"]] = figures.get((r["start_ns"], r["end_ns"]), 0) + r["uj"]
    windows = [(a, b, uj, "") for (a, b), uj in figures.items()]
    windows += [(g["start_ns"], g["end_ns"], None, g["reason"]) for g in doc["gaps"]]
    return sorted(windows), doc


def assert_tiled(windows) -> None:
    for before, after in zip(windows, windows[1:]):
        assert after[0] == before[1], f"hole or overlap between {before} and {after}"


def drained(s, a) -> None:
    """Stop the agent the polite way: it waits for the scheduler to acknowledge everything."""
    a.stop()
    assert "unacknowledged" not in a.log_path.read_text()


def test_sigkill_loop_loses_not_one_microjoule(cluster):
    rng = random.Random(14)
    s = cluster()
    # The recorded counter is young (3.3 kJ since its driver loaded), and a
    # restart is bridged only if no counter restart could fit in the downtime
    # at 1.4 kW: start 25 s into the trace (13 kJ), where that allows ~9 s.
    origin = time.time_ns() - 25 * 10**9
    offset = origin - ROWS[0].t_ns
    kills, scheduler_kills = 10, {2, 6}
    slept = 0.0

    def pause(seconds: float) -> None:
        nonlocal slept
        time.sleep(seconds)
        slept += seconds

    # the first life lives until its first window is counted: the span starts there,
    # however slowly a loaded host starts the agents that follow
    a = cluster.agent(s, HOST, speed=1, args=agent_args(origin))
    wait_for("the first window counted", lambda: device_windows(s)[0], timeout_s=60)
    a.kill()
    for i in range(kills):
        a = cluster.agent(s, HOST, speed=1, args=agent_args(origin))
        pause(rng.uniform(0.4, 2.5))        # some kills land before the first window, some mid-window
        a.kill()
        if i in scheduler_kills:            # the scheduler dies too, while the agent is down
            s.kill()
            pause(rng.uniform(0.1, 0.8))
            s.start()
        pause(rng.uniform(0.05, 1.5))
    a = cluster.agent(s, HOST, speed=1, args=agent_args(origin))
    pause(2.0)
    s.kill()                                # and once while the agent is up: it spools, then resends
    pause(0.5)
    s.start()
    pause(1.5)
    drained(s, a)

    windows, doc = device_windows(s)
    assert_tiled(windows)
    assert doc["gaps"] == [], "the epoch never changed: no second may be unaccounted"
    first, last = windows[0][0] - offset, windows[-1][1] - offset
    assert last - first > slept * 1e9   # the loop covered the span it was meant to (trace time is wall time)
    assert sum(w[2] for w in windows) == counter_at(last) - counter_at(first)   # exactly: 0 µJ unaccounted
    device = next(d for d in doc["devices"] if d["device_id"] == DEVICE)
    assert device["unaccounted_ns"] == 0 and device["lost_windows"] == 0


def test_a_driver_reload_while_the_agent_is_down_is_exactly_the_downtime_as_a_gap(cluster):
    s = cluster()
    origin = time.time_ns()
    offset = origin - ROWS[0].t_ns
    a = cluster.agent(s, HOST, speed=1, args=agent_args(origin))
    time.sleep(3.0)
    a.kill()
    reload_ms = (time.time_ns() - origin) // 1_000_000 + 200   # the driver reloads during the downtime
    time.sleep(0.8)
    a = cluster.agent(s, HOST, speed=1, args=agent_args(origin, "--replay-reload-at-ms", str(reload_ms)))
    time.sleep(3.0)
    drained(s, a)

    windows, doc = device_windows(s)
    assert_tiled(windows)
    gaps = [w for w in windows if w[2] is None]
    assert len(gaps) == 1 and gaps[0][3] == "GAP_COUNTER_RESET"
    gap_start, gap_end = gaps[0][0] - offset, gaps[0][1] - offset
    reload = ROWS[0].t_ns + reload_ms * 1_000_000
    assert gap_start < reload < gap_end   # the gap is the downtime: from the last reading to the first after
    before = [w for w in windows if w[1] <= gaps[0][0]]
    after = [w for w in windows if w[0] >= gaps[0][1]]
    assert before and after and all(w[2] is not None for w in before + after)
    first, last = windows[0][0] - offset, windows[-1][1] - offset
    measured = counter_at(last) - counter_at(first) - (counter_at(gap_end) - counter_at(gap_start))
    assert sum(w[2] for w in before + after) == measured
    device = next(d for d in doc["devices"] if d["device_id"] == DEVICE)
    assert device["unaccounted_ns"] == gaps[0][1] - gaps[0][0]


def test_a_full_spool_becomes_one_exact_gap_that_the_scheduler_counts_per_host(cluster):
    metrics = f"127.0.0.1:{free_port()}"
    s = cluster(metrics=metrics)
    origin = time.time_ns()
    offset = origin - ROWS[0].t_ns
    a = cluster.agent(s, HOST, speed=1, args=("--replay-origin-unix-ns", str(origin), "--window-ms", "200"),
                      toml="[spool]\nmax_windows = 5\n")
    wait_for("first windows", lambda: len(s.json("splits")["rows"]) >= 2)
    s.kill()
    time.sleep(3.0)   # ~15 windows for a spool of 5: the oldest merge into a gap
    s.start()
    wait_for("the overflow gap", lambda: s.json("splits", "--device", DEVICE)["gaps"], timeout_s=30)
    time.sleep(0.5)
    drained(s, a)

    windows, doc = device_windows(s)
    assert_tiled(windows)
    gaps = [g for g in doc["gaps"]]
    assert {g["reason"] for g in gaps} == {"GAP_SPOOL_OVERFLOW"}
    lost = sum(g["lost_windows"] for g in gaps)
    span = sum(g["end_ns"] - g["start_ns"] for g in gaps)
    assert lost >= 5 and span >= lost * 150_000_000   # each merged window was ~200 ms
    first, last = windows[0][0] - offset, windows[-1][1] - offset
    in_gaps = sum(counter_at(g["end_ns"] - offset) - counter_at(g["start_ns"] - offset) for g in gaps)
    assert sum(w[2] for w in windows if w[2] is not None) == counter_at(last) - counter_at(first) - in_gaps
    device = next(d for d in doc["devices"] if d["device_id"] == DEVICE)
    assert (device["unaccounted_ns"], device["lost_windows"]) == (span, lost)
    text = urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10).read().decode()
    assert f'pool_host_windows_lost_total{{host="{HOST}"}} {float(lost)}' in text
    assert f'pool_host_unaccounted_seconds_total{{host="{HOST}",reason="SpoolOverflow"}} {span / 1e9}' in text
    assert a.log_path.read_text().count("spool was full") == 1   # once per episode, with what it covered
    table = s.poolctl("splits", "--device", DEVICE).stdout   # the table shows it beside the µJ
    assert "unaccounted  lost windows" in table and "GAP_SPOOL_OVERFLOW" in table
