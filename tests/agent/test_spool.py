"""The durable spool: windows survive the process, the oldest merge into an
exact gap record when it is full, and restarts anywhere tile time with the
counter's delta to the µJ (an in-process model of tests/e2e/test_agent_faults)."""

from __future__ import annotations

import threading

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.counters import Last
from agent.meters.replay import ReplayMeter, bundled_trace, load_trace
from agent.metrics import AgentMetrics
from agent.sampler import Sampler
from agent.spool import Spool
from agent.windows import Sequencer, Window
from protos.energy import GapReason, Grade
from protos.pool.v1 import types_pb2

S = 1_000_000_000
ROWS, _ = load_trace(bundled_trace())


def window(device: str, start: int, uj: int | None = 1000) -> Window:
    return Window(device, 0, start * S, (start + 1) * S, uj, Grade.HwShunt, uj)


def spool_at(tmp_path, bound: int = 100, metrics: AgentMetrics | None = None) -> Spool:
    return Spool(tmp_path / "spool.sqlite", bound, metrics or AgentMetrics())


def test_windows_and_last_readings_survive_the_process(tmp_path):
    spool = spool_at(tmp_path)
    last = Last(5 * S, 1796000000 * S, (123, 456), "rapl:0:boot=b")
    spool.append([window("GPU-1", 0), window("GPU-1", 1, None)], {"GPU-1": last})
    spool.close()   # or killed: the transaction was committed
    again = spool_at(tmp_path)
    assert [(w.seq, w.HasField("uj")) for w in again.unacknowledged()] == [(1, True), (2, False)]
    assert again.last_readings() == {"GPU-1": last}
    again.ack(1)
    assert [w.seq for w in again.offer(0, 10, 0)] == [2] and len(again) == 1


def test_the_gauges_read_the_spool_when_scraped(tmp_path):
    metrics = AgentMetrics()
    spool = spool_at(tmp_path, metrics=metrics)
    spool.append([window("GPU-1", 0), window("GPU-1", 1)], {})
    sample = metrics.registry.get_sample_value
    assert sample("pool_agent_buffered_windows") == 2 and sample("pool_agent_window_lag_seconds") > 1e9
    spool.ack(2)
    assert sample("pool_agent_buffered_windows") == 0 and sample("pool_agent_window_lag_seconds") == 0


def test_a_full_spool_merges_the_oldest_into_one_gap_per_device_with_their_exact_span(tmp_path, caplog):
    metrics = AgentMetrics()
    spool = spool_at(tmp_path, bound=6, metrics=metrics)
    for t in range(5):   # two devices, one window each per boundary
        spool.append([window("GPU-1", t), window("GPU-2", t, 2000)], {})
    assert len(spool) <= 6
    stored = spool.unacknowledged()
    gaps = [w for w in stored if w.gap_reason == types_pb2.GAP_SPOOL_OVERFLOW]
    assert {g.device_id for g in gaps} == {"GPU-1", "GPU-2"}
    for g in gaps:   # the gap starts where the device's first window started and ends where the next begins
        rest = [w for w in stored if w.device_id == g.device_id and w is not g]
        assert g.start_ns == 0 and not g.HasField("uj") and g.end_ns == min(w.start_ns for w in rest)
        assert g.lost_windows == g.end_ns // S   # one measured window per second merged
    lost = sum(g.lost_windows for g in gaps)
    assert metrics.windows_lost.labels("GPU-1")._value.get() + metrics.windows_lost.labels("GPU-2")._value.get() == lost
    seconds = metrics.unaccounted.labels("GPU-1", "SpoolOverflow")._value.get()
    assert seconds == next(g for g in gaps if g.device_id == "GPU-1").end_ns / S
    assert caplog.text == ""   # logged once per episode, when it is over
    spool.ack(max(w.seq for w in stored))   # the scheduler caught up
    spool.append([window("GPU-1", 5)], {})
    assert caplog.text.count("spool was full") == 1 and f"{lost} measured windows" in caplog.text


def test_windows_that_may_be_in_flight_are_never_merged(tmp_path):
    spool = spool_at(tmp_path, bound=3)
    spool.append([window("GPU-1", t) for t in range(3)], {})
    offered = spool.offer(0, 2, 0)   # seq 1 and 2 are with the scheduler, unanswered
    spool.append([window("GPU-1", t) for t in range(3, 6)], {})
    kept = spool.unacknowledged()
    assert [w.seq for w in kept[:2]] == [w.seq for w in offered] and all(w.HasField("uj") for w in kept[:2])
    assert kept[2].gap_reason == types_pb2.GAP_SPOOL_OVERFLOW and kept[2].start_ns == 2 * S


def test_windows_offered_on_a_stream_that_died_stay_unmerged_after_a_new_register(tmp_path):
    """The old stream's batch may still be counted after Register answered:
    only an ack makes those windows mergeable (else a gap could overlap them)."""
    spool = spool_at(tmp_path, bound=3)
    spool.append([window("GPU-1", t) for t in range(3)], {})
    spool.offer(0, 3, 0)      # all three sent; the stream dies
    spool.resolved(1)         # Register: 1 is counted, 2 and 3 may still be
    spool.append([window("GPU-1", t) for t in range(3, 6)], {})
    kept = spool.unacknowledged()
    assert [(w.seq, w.HasField("uj")) for w in kept[:2]] == [(2, True), (3, True)]
    assert [w.seq for w in spool.offer(1, 10, 0)][:2] == [2, 3]   # and they are resent


def test_no_more_than_in_flight_windows_wait_for_their_ack(tmp_path):
    spool = Spool(tmp_path / "spool.sqlite", 100, AgentMetrics(), in_flight=4)
    spool.append([window("GPU-1", t) for t in range(10)], {})
    first = spool.offer(0, 3, 0)
    assert len(first) == 3 and len(spool.offer(3, 3, 0)) == 1 and spool.offer(4, 3, 0) == []
    spool.ack(2)
    assert [w.seq for w in spool.offer(4, 3, 0)] == [5, 6]


ORIGIN = 1796000000 * S
START = ROWS[0].t_ns + 25 * S   # 13 kJ on the counter: restarts of a few seconds are provable


def counter_at(t: int) -> int:
    return next(r.value for r in reversed(ROWS) if r.t_ns <= t)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 40)), min_size=1, max_size=5))
def test_restarts_anywhere_tile_time_and_sum_to_the_counter_exactly(tmp_path_factory, lives):
    """Each life runs for a number of 100 ms steps, then dies without a word
    (nothing acknowledged); the next starts after a downtime of 100 ms steps."""
    path = tmp_path_factory.mktemp("spool") / "spool.sqlite"
    t = START
    for alive, down in lives:
        meter = ReplayMeter(bundled_trace(), 0, origin_unix_ns=ORIGIN)
        meter.clock.sleep_until(t, threading.Event())
        spool = Spool(path, 10**6, AgentMetrics())
        sampler: Sampler

        def sink(windows, spool=spool):
            spool.append(windows, sampler.lasts())

        sampler = Sampler([meter], meter.clock, S // 2, Sequencer(), sink, stall_ns=S // 2,
                          end_ns=t + alive * S // 10)
        sampler.resume(spool.last_readings())
        sampler.run(threading.Event())
        spool.close()
        t += (alive + down) * S // 10
    windows = Spool(path, 10**6, AgentMetrics()).unacknowledged()
    offset = ORIGIN - ROWS[0].t_ns
    for before, after in zip(windows, windows[1:]):
        assert after.start_ns == before.end_ns and after.seq > before.seq
    if windows:
        assert all(w.HasField("uj") for w in windows), [GapReason(w.gap_reason) for w in windows if w.gap_reason]
        first, last = windows[0].start_ns - offset, windows[-1].end_ns - offset
        assert sum(w.uj for w in windows) == counter_at(last) - counter_at(first)


def test_a_stream_asking_after_close_gets_nothing_and_no_error(tmp_path):
    """The gRPC thread that pulls a stream's requests may be waiting in offer
    when the agent stops (client.close, then spool.close): it wakes with
    nothing, instead of reading a closed database (an 'Exception iterating
    requests!' traceback in the agent's log)."""
    spool = spool_at(tmp_path)
    got: list = []
    waiting = threading.Thread(target=lambda: got.append(spool.offer(0, 10, timeout_s=5)))
    waiting.start()
    spool.close()
    waiting.join(timeout=2)
    assert not waiting.is_alive() and got == [[]], "a waiting offer wakes at close"
    assert spool.offer(0, 10, timeout_s=0.01) == []
    spool.close()   # twice: once is enough
