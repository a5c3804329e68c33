"""A window the scheduler keeps refusing (agent/refusals.py), against a real
loopback gRPC server that refuses the way the scheduler does: INVALID_WINDOW
for the whole batch, naming the window's seq in `pool-window-seq`."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time

import grpc
import pytest

from agent.loopback import LoopbackReceiver, serve
from agent.metrics import AgentMetrics
from agent.spool import Spool
from agent.stream import Backoff, StreamClient
from agent.windows import Window
from protos.energy import GapReason, Grade
from protos.pool.v1 import agent_pb2
from protos.refusals import WINDOW_SEQ_KEY, window_seq_metadata

BAD = 4


def windows(seqs, uj=1000):
    return [Window("GPU-1", s, s * 10**9, (s + 1) * 10**9, uj, Grade.HwShunt, uj) for s in seqs]


class Refusing(LoopbackReceiver):
    """Refuses every batch holding window BAD above what it counted: while it has
    a figure, or (`gaps`) whatever it is; with `code`, as another failure."""

    def __init__(self, gaps: bool = False, code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT):
        super().__init__()
        self.gaps, self.code = gaps, code
        self.refusals = 0
        self.batches: list[list[int]] = []

    def Stream(self, request_iterator, context):  # noqa: N802 - the servicer's method
        next(request_iterator, None)
        for message in request_iterator:
            seqs = [w.seq for w in message.batch.windows]
            self.batches.append(seqs)
            bad = next((w for w in message.batch.windows if w.seq == BAD and w.seq > self.acked), None)
            if bad is not None and (self.gaps or bad.HasField("uj")):
                with self.lock:
                    self.refusals += 1
                context.set_trailing_metadata(window_seq_metadata(BAD))
                context.abort(self.code, f"INVALID_WINDOW: window seq {BAD} from 'host-a': it breaks a rule")
            yield agent_pb2.SchedulerMessage(ack=agent_pb2.Ack(acked_seq=self._count(message.batch.windows)))


def streamed(tmp_path, receiver, what, ready, timeout_s=10) -> tuple[Spool, AgentMetrics]:
    """Windows 1..10 spooled at one boundary (so they go in one batch), streamed
    to `receiver` by a StreamClient (refusals_before_gap 3) until `ready()`."""
    metrics = AgentMetrics()
    spool = Spool(tmp_path / "spool.sqlite", 100, metrics)
    spool.resolved(0)
    spool.append(windows(range(1, 11)), {})
    server, port = serve(receiver)
    register = lambda: agent_pb2.RegisterRequest(host_id="host-a", window_ns=10**9)  # noqa: E731
    client = StreamClient(f"127.0.0.1:{port}", register, spool, metrics, batch_max=50,
                          backoff=Backoff(0.01, 0.05), refusals_before_gap=3)
    threading.Thread(target=client.run, daemon=True).start()
    try:
        deadline = time.monotonic() + timeout_s
        while not ready(spool):
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.01)
    finally:
        client.close()
        server.stop(0)
    return spool, metrics


def test_the_windows_before_go_first_then_the_refused_one_becomes_a_gap_and_the_rest_count(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    receiver = Refusing()
    spool, metrics = streamed(tmp_path, receiver, "every window counted",
                              lambda spool: receiver.acked == 10 and len(spool) == 0)
    assert receiver.refusals == 3                     # refusals_before_gap, then the gap passed
    assert receiver.batches[0] == list(range(1, 11))  # refused whole at 4...
    assert receiver.batches[1] == [1, 2, 3]           # ...so 1..3 went on their own next
    assert all(b[0] >= BAD or b[-1] < BAD for b in receiver.batches[1:])   # never 4 with those before it
    gap = receiver.counted[BAD]
    assert not gap.HasField("uj") and not gap.shares
    assert (gap.gap_reason, gap.lost_windows, gap.device_id, gap.start_ns, gap.end_ns, gap.grade) == (
        GapReason.Refused, 1, "GPU-1", BAD * 10**9, (BAD + 1) * 10**9, int(Grade.HwShunt))
    assert all(receiver.counted[s].uj == 1000 for s in range(1, 11) if s != BAD)
    assert metrics.registry.get_sample_value("pool_agent_windows_refused_total", {"device": "GPU-1"}) == 1
    assert metrics.registry.get_sample_value("pool_agent_windows_lost_total", {"device": "GPU-1"}) == 1
    assert metrics.registry.get_sample_value("pool_agent_unaccounted_seconds_total",
                                             {"device": "GPU-1", "reason": "Refused"}) == 1.0
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "GAP_REFUSED" in errors[0].getMessage()
    assert "it breaks a rule" in errors[0].getMessage()   # the scheduler's own message


def test_a_refused_gap_stays_in_the_spool_and_is_sent_again_without_end(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    receiver = Refusing(gaps=True)
    # the server counts a refusal before the agent has read it: wait for the agent's log of it too
    logged = lambda: [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]  # noqa: E731
    spool, metrics = streamed(tmp_path, receiver, "refusals past the limit, logged",
                              lambda _: receiver.refusals >= 6 and len(logged()) >= 4)
    assert receiver.acked == BAD - 1                       # the windows before it counted
    left = spool.unacknowledged()
    assert [w.seq for w in left] == list(range(BAD, 11))   # nothing dropped: the gap and all after it
    assert left[0].gap_reason == GapReason.Refused and all(w.HasField("uj") for w in left[1:])
    assert metrics.registry.get_sample_value("pool_agent_windows_refused_total", {"device": "GPU-1"}) == 1
    errors = logged()
    assert "GAP_REFUSED" in errors[0] and len(errors) >= 4   # each refusal of the gap is logged
    assert all("stays in the spool and is sent again" in e for e in errors[1:])


def test_a_failure_of_another_code_neither_counts_nor_makes_a_gap(tmp_path):
    receiver = Refusing(code=grpc.StatusCode.UNAVAILABLE)
    spool, metrics = streamed(tmp_path, receiver, "failures past the limit", lambda _: receiver.refusals >= 6)
    assert receiver.acked == 0 and all(w.HasField("uj") for w in spool.unacknowledged())
    assert metrics.registry.get_sample_value("pool_agent_windows_refused_total", {"device": "GPU-1"}) is None


def test_a_spool_that_cannot_write_the_gap_keeps_the_window_and_the_stream_going(tmp_path, caplog, monkeypatch):
    from agent.refusals import Refusals
    from agent.spool import SpoolError
    spool = Spool(tmp_path / "spool.sqlite", 100, AgentMetrics())
    spool.resolved(0)
    spool.append(windows(range(1, 6)), {})

    def full(seq):
        raise SpoolError("spool: database or disk is full")
    monkeypatch.setattr(spool, "refuse", full)
    refusals = Refusals(spool, 1)
    assert refusals.refused(3, "INVALID_WINDOW: window seq 3 from 'host-a': it breaks a rule")   # no exception
    assert all(w.HasField("uj") for w in spool.unacknowledged())
    [error] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "could not be replaced by a gap (spool: database or disk is full): it is sent again" in error


CHILD = """
import sys, time
from agent.metrics import AgentMetrics
from agent.spool import Spool
from agent.windows import Window
from protos.energy import Grade
spool = Spool(__import__("pathlib").Path(sys.argv[1]), 100, AgentMetrics())
spool.resolved(0)
spool.append([Window("GPU-1", s, s * 10**9, (s + 1) * 10**9, 1000, Grade.HwShunt, 1000) for s in range(1, 6)], {})
assert spool.refuse(3) is not None
print("replaced", flush=True)
time.sleep(60)
"""


def test_the_replacement_survives_a_sigkill(tmp_path):
    path = tmp_path / "spool.sqlite"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "replaced\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    spool = Spool(path, 100, AgentMetrics())
    left = spool.unacknowledged()
    assert [w.seq for w in left] == [1, 2, 3, 4, 5]
    assert [w.HasField("uj") for w in left] == [True, True, False, True, True]
    assert (left[2].gap_reason, left[2].lost_windows, left[2].start_ns, left[2].end_ns) == (
        GapReason.Refused, 1, 3 * 10**9, 4 * 10**9)
    assert spool.refuse(3) is None   # a gap already: a replacement would change nothing the scheduler judges


def test_metadata_names_the_seq_under_its_documented_key():
    assert window_seq_metadata(7) == ((WINDOW_SEQ_KEY, "7"),) and WINDOW_SEQ_KEY == "pool-window-seq"


@pytest.mark.parametrize("value", ["0", "-1", "x"])
def test_refusals_before_gap_must_be_positive(tmp_path, value):
    from agent.config import ConfigError, load
    path = tmp_path / "agent.toml"
    path.write_text(f"[stream]\nrefusals_before_gap = {value if value != 'x' else repr(value)}\n")
    with pytest.raises(ConfigError, match="stream.refusals_before_gap must be"):
        load(path)


def test_the_agent_toml_example_in_operations_loads_with_the_key(tmp_path):
    from pathlib import Path

    from agent.config import load
    text = (Path(__file__).parents[2] / "docs" / "OPERATIONS.md").read_text()
    example = text.split("A production `agent.toml`", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "agent.toml"
    path.write_text(example)
    assert load(path).stream.refusals_before_gap == 3
