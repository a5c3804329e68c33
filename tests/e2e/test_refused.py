"""A window the scheduler refuses does not stop a host's evidence: a real
pool-agent replaying a trace against a real pool-scheduler whose power limit
refuses exactly one of its windows (as a scheduler upgrade that tightened
`[limits] max_power_w` would). The windows before it are counted, it becomes
one GAP_REFUSED gap after `stream.refusals_before_gap` refusals, every window
after it is counted and the spool drains; a refusal that clears before the
limit leaves the window counted with its figure. The scheduler's side of a
GAP_REFUSED gap is checked in process at the end."""

from __future__ import annotations

import time
import urllib.request

import pytest

from protos.pool.v1 import agent_pb2, ops_pb2, types_pb2
from scheduler.kernel import ClusterState
from scheduler.service import convert
from scheduler.service.windows import evidence
from scheduler.service.config import Limits
from scheduler.service.windows.batch import batch_columns
from scheduler.service.windows.projections import Observed
from scheduler.service.windows.occupancy import Issued

from .conftest import free_port, wait_for

HOST = "refused-host"
STEP_NS = 10_000_000          # a trace row every 10 ms
WATTS = 100                   # the trace's steady draw
SPIKE_AT_NS = 5_000_000_000   # 5 s in, the counter jumps by SPIKE_UJ in one step
SPIKE_UJ = 60_000_000         # 60 J: the one window holding it averages ≥ 400 W at 200 ms
LIMIT = f"\n[limits]\nmax_power_w = {{ replay = {3 * WATTS} }}\n"   # refuses that window, and only it


def spiked_trace(path, seconds: int = 40):
    """A counter at a steady 100 W with one 60 J step: every window has a mean of
    exactly 100 W (windows are cut at readings), except the one holding the step."""
    lines = ["t_mono_ns,energy_mj"]
    t0, mj = 1_000_000_000, 1_000_000
    for i in range(seconds * 1_000_000_000 // STEP_NS):
        t = t0 + i * STEP_NS
        lines.append(f"{t},{mj}")
        mj += WATTS * STEP_NS // 1_000_000 + (SPIKE_UJ // 1000 if i * STEP_NS == SPIKE_AT_NS else 0)
    path.write_text("\n".join(lines) + "\n")
    return path


def device_view(s, device: str):
    """(windows with figures as (start, end, µJ), gaps as dicts) the scheduler holds for `device`."""
    doc = s.json("splits", "--device", device)
    figures: dict[tuple[int, int], int] = {}
    for r in doc["rows"]:
        figures[r["start_ns"], r["end_ns"]] = figures.get((r["start_ns"], r["end_ns"]), 0) + r["uj"]
    return sorted((a, b, uj) for (a, b), uj in figures.items()), doc["gaps"], doc


def metric(text: str, name: str) -> float:
    """The sum of a metric's samples in a /metrics text; it must have one (a
    renamed metric would otherwise read as 0 and pass every `== 0` here)."""
    samples = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith((name + " ", name + "{"))]
    assert samples, f"no sample of {name} in /metrics"
    return sum(samples)


def scrape(address: str) -> str:
    return urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read().decode()


def start_agent(cluster, s, trace, refusals: int, metrics: str):
    return cluster.agent(s, HOST, speed=1, args=("--replay", str(trace), "--window-ms", "200"), metrics=metrics,
                         toml=f"refusals_before_gap = {refusals}\nbackoff_initial_ms = 50\n")


def refusals_logged(agent) -> int:
    return agent.log_path.read_text().count("INVALID_WINDOW")


@pytest.mark.slow
def test_a_window_refused_on_every_session_becomes_one_gap_and_every_other_window_counts(cluster, tmp_path):
    trace = spiked_trace(tmp_path / "spiked.csv")
    device = "replay:spiked"
    scheduler_metrics, agent_metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    s = cluster(metrics=scheduler_metrics, extra=LIMIT)
    a = start_agent(cluster, s, trace, 3, agent_metrics)
    wait_for("the first windows", lambda: len(device_view(s, device)[0]) >= 3)
    s.kill()                  # down across the spike: the batch resent on return holds windows before,
    time.sleep(5.0)           # at and after the refused one, so the ones before must be sent on their own
    s.start()
    wait_for("the refused window's gap", lambda: device_view(s, device)[1], timeout_s=30)
    time.sleep(1.0)
    wait_for("the spool to drain", lambda: metric(scrape(agent_metrics), "pool_agent_buffered_windows") == 0)
    text = scrape(agent_metrics)
    figures, gaps, doc = device_view(s, device)
    a.stop()

    assert len(gaps) == 1, gaps
    [gap] = gaps
    assert (gap["reason"], gap["lost_windows"]) == ("GAP_REFUSED", 1)
    spans = sorted([(a_, b, uj) for a_, b, uj in figures] + [(gap["start_ns"], gap["end_ns"], None)])
    for before, after in zip(spans, spans[1:]):
        assert after[0] == before[1], f"hole or overlap between {before} and {after}"
    earlier = [w for w in figures if w[1] <= gap["start_ns"]]
    later = [w for w in figures if w[0] >= gap["end_ns"]]
    assert len(earlier) >= 10 and len(later) >= 5 and len(earlier) + len(later) == len(figures)
    for start, end, uj in figures:   # every window counted with its figure: exactly the steady draw
        assert uj * 1_000_000_000 == WATTS * 1_000_000 * (end - start), (start, end, uj)
    # the agent: the windows before it went first, the window was refused 3 times, then one gap
    log = a.log_path.read_text()
    assert log.count("GAP_REFUSED gap") == 1 and "ERROR" in log
    refused_seqs = {line.split("window seq ")[1].split(" ")[0] for line in log.splitlines()
                    if "INVALID_WINDOW" in line}
    assert len(refused_seqs) == 1, f"only the one window was ever refused: {refused_seqs}"
    [seq] = refused_seqs
    counted_before = log.index(f"from seq {seq}\n")   # a Register said everything below it was counted...
    assert counted_before < log.index("GAP_REFUSED gap")   # ...while it was still refused, before it was a gap
    assert log.count(f"window seq {seq} refused (") == 2   # refusals 1 and 2 of 3; the third made the gap
    assert "above 300 W, the most a 'replay' device may draw" in log   # the scheduler's own message
    assert metric(text, "pool_agent_windows_refused_total") == 1
    assert metric(text, "pool_agent_windows_lost_total") == 1
    assert f'pool_agent_unaccounted_seconds_total{{device="{device}",reason="Refused"}}' in text
    # the scheduler reports it wherever gaps are reported
    device_total = next(d for d in doc["devices"] if d["device_id"] == device)
    assert (device_total["unaccounted_ns"], device_total["lost_windows"]) == (gap["end_ns"] - gap["start_ns"], 1)
    host = scrape(scheduler_metrics)
    assert f'pool_host_unaccounted_seconds_total{{host="{HOST}",reason="Refused"}}' in host
    assert f'pool_host_windows_lost_total{{host="{HOST}"}} 1.0' in host
    assert "GAP_REFUSED" in s.poolctl("splits", "--device", device).stdout


@pytest.mark.slow
def test_a_refusal_that_clears_before_the_limit_leaves_the_window_counted_with_its_figure(cluster, tmp_path):
    trace = spiked_trace(tmp_path / "spiked.csv")
    device = "replay:spiked"
    agent_metrics = f"127.0.0.1:{free_port()}"
    s = cluster(extra=LIMIT)
    a = start_agent(cluster, s, trace, 100, agent_metrics)
    wait_for("the window to be refused", lambda: refusals_logged(a) >= 2, timeout_s=30)
    s.stop()                  # the operator puts the limit back: the scheduler can accept the window now
    s.config.write_text(s.config.read_text().replace(LIMIT, "\n"))
    s.start()
    wait_for("the spike's window counted", lambda: any(
        uj * 1_000_000_000 > 3 * WATTS * 1_000_000 * (e - st) for st, e, uj in device_view(s, device)[0]), timeout_s=30)
    wait_for("the spool to drain", lambda: metric(scrape(agent_metrics), "pool_agent_buffered_windows") == 0)
    text = scrape(agent_metrics)
    figures, gaps, _ = device_view(s, device)
    a.stop()

    assert gaps == [] and refusals_logged(a) < 100
    assert metric(text, "pool_agent_windows_refused_total") == 0
    assert sum(uj for _, _, uj in figures) >= SPIKE_UJ   # the step is in the figures: nothing became a gap
    assert "GAP_REFUSED" not in a.log_path.read_text()


# -- the scheduler's side, in process: one door for every gap ---------------------------

def test_a_refused_gap_passes_the_evidence_rules_and_is_reported_as_gap_refused():
    meters = [types_pb2.DeviceMeter(device_id="GPU-0", kind=types_pb2.GPU, device_type="NVIDIA H200")]
    measured = agent_pb2.Window(device_id="GPU-0", seq=1, start_ns=100, end_ns=200, uj=10, grade=types_pb2.GRADE_HW_SHUNT,
                                shares=[types_pb2.Share(occupant="unallocated", uj=10, grade=types_pb2.GRADE_HW_SHUNT)])
    gap = agent_pb2.Window(device_id="GPU-0", seq=2, start_ns=200, end_ns=300, grade=types_pb2.GRADE_HW_SHUNT,
                           gap_reason=types_pb2.GAP_REFUSED, lost_windows=1)
    batch = batch_columns(agent_pb2.WindowBatch(windows=[measured, gap]))[0]
    context = evidence.Context("h1", evidence.device_types(meters), frozenset(), 0, {}, 10_000, Limits(),
                               lambda v: Issued(v, {}) if v == 0 else None)
    evidence.check_order("h1", batch)
    evidence.check(context, batch, [0, 0])   # the same door as every gap: nothing refused
    assert batch.gap == [None, "Refused"] and batch.lost == [0, 1]
    observed = Observed(10)
    observed.fold(ClusterState(), "h1", batch, 7)
    [record] = observed.gap_records
    assert (record.reason, record.lost_windows, record.start_ns, record.end_ns) == ("Refused", 1, 200, 300)
    assert dict(observed.unaccounted_ns) == {("h1", "Refused"): 100} and observed.lost_windows["h1"] == 1
    assert convert.gap(record).reason == types_pb2.GAP_REFUSED == ops_pb2.Gap(reason="GAP_REFUSED").reason


def test_every_wire_gap_reason_has_a_name_in_the_body_and_maps_back_to_itself():
    from protos.energy import GapReason
    from scheduler.service.windows.batch import GAP_NAMES
    from scheduler.service.windows.projections import GapRecord
    wire = {v.number: v.name for v in types_pb2.GapReason.DESCRIPTOR.values if v.number}
    assert {int(r) for r in GapReason} == set(wire)   # the agent's enum is the wire's, GAP_REFUSED included
    for number, name in wire.items():
        record = GapRecord("h1", "GPU-0", 0, 1, GAP_NAMES[number], 1, frozenset(), 1)
        assert types_pb2.GapReason.Name(convert.gap(record).reason) == name   # never GAP_REASON_UNSPECIFIED
