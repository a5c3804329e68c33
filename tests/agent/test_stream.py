"""Streaming to a real loopback gRPC server that is stopped and restarted."""

from __future__ import annotations

import threading
import time

import pytest

from agent.loopback import LoopbackReceiver, serve
from agent.metrics import AgentMetrics
from agent.stream import Backoff, Outbox, StreamClient
from agent.windows import Sequencer, Window
from protos.energy import Grade
from protos.pool.v1 import agent_pb2


def windows(seqs, uj=1000):
    return [Window("GPU-1", s, s * 10**9, (s + 1) * 10**9, uj, Grade.HwShunt, uj) for s in seqs]


def client_for(port, outbox, metrics, sequencer=None):
    sequencer = sequencer or Sequencer()
    register = lambda: agent_pb2.RegisterRequest(host_id="host-a", window_ns=10**9)  # noqa: E731
    return StreamClient(f"127.0.0.1:{port}", register, outbox, metrics, on_acked=sequencer.at_least,
                        batch_max=50, backoff=Backoff(0.02, 0.2))


@pytest.mark.slow
def test_every_window_arrives_exactly_once_across_a_server_restart():
    receiver, metrics = LoopbackReceiver(), AgentMetrics()
    server, port = serve(receiver)
    outbox = Outbox(10_000, metrics)
    client = client_for(port, outbox, metrics)
    threading.Thread(target=client.run, daemon=True).start()
    produced = iter(range(1, 601))

    def produce(n):
        for _ in range(n // 10):
            outbox.put(windows([next(produced) for _ in range(10)]))
            time.sleep(0.002)

    produce(200)
    assert receiver.wait_for(200, 10)
    server.stop(0)                      # the scheduler goes away mid-stream
    produce(200)                        # windows keep coming: buffered
    assert len(outbox) >= 190
    server, _ = serve(receiver, f"127.0.0.1:{port}")   # back, with its durable counted state
    produce(200)
    assert receiver.wait_for(600, 15)
    deadline = time.monotonic() + 5
    while len(outbox) and time.monotonic() < deadline:  # the last ack is on its way
        time.sleep(0.01)
    client.close()
    server.stop(0)
    assert sorted(receiver.counted) == list(range(1, 601))  # each window counted, once
    assert receiver.registrations >= 2 and len(outbox) == 0
    assert metrics.buffered._value.get() == 0


def test_resend_starts_above_the_schedulers_acked_seq():
    receiver, metrics = LoopbackReceiver(), AgentMetrics()
    receiver.acked = 5  # already counted before this agent restarted
    server, port = serve(receiver)
    outbox, sequencer = Outbox(100, metrics), Sequencer()
    outbox.put(windows(range(3, 9)))
    client = client_for(port, outbox, metrics, sequencer)
    threading.Thread(target=client.run, daemon=True).start()
    assert receiver.wait_for(8, 10)
    client.close()
    server.stop(0)
    assert sorted(receiver.counted) == [6, 7, 8] and receiver.duplicates == 0
    assert sequencer.next() > 5  # Register said 5 was counted: never reuse it


def test_buffer_is_bounded_drops_oldest_and_counts_them(caplog):
    metrics = AgentMetrics()
    outbox = Outbox(5, metrics)
    outbox.put(windows(range(1, 9)))
    assert [w.seq for w in outbox.after(0, 100, 0)] == [4, 5, 6, 7, 8]
    assert metrics.dropped._value.get() == 3 and metrics.buffered._value.get() == 5
    assert "dropped the 3 oldest, seq 1..3" in caplog.text
    outbox.ack(6)
    assert [w.seq for w in outbox.after(0, 100, 0)] == [7, 8]


def test_backoff_grows_with_jitter_up_to_the_cap_and_resets():
    backoff = Backoff(0.5, 4.0)
    delays = [backoff.next() for _ in range(6)]
    for n, d in enumerate(delays):
        ceiling = min(4.0, 0.5 * 2 ** n)
        assert ceiling / 2 <= d <= ceiling
    backoff.reset()
    assert backoff.next() <= 0.5


def test_sequencer_resumes_above_its_reserved_block(tmp_path):
    state = tmp_path / "seq"
    first = Sequencer(state, block=10)
    assert [first.next() for _ in range(3)] == [1, 2, 3]
    assert Sequencer(state, block=10).next() == 11  # a restart never repeats a seq


def test_pool_agent_streams_a_replay_to_the_scheduler(tmp_path, in_process):
    from agent.main import main
    receiver = LoopbackReceiver()
    server, port = serve(receiver)
    config = tmp_path / "agent.toml"
    config.write_text(f'host_id = "replay-host"\nstate_dir = "{tmp_path}"\n[metrics]\nlisten = ""\n')
    try:
        with pytest.raises(SystemExit) as done:
            main(["--config", str(config), "--replay", "bundled", "--replay-speed", "0",
                  "--scheduler", f"127.0.0.1:{port}"])
    finally:
        server.stop(0)
    assert done.value.code == 0
    assert len(receiver.counted) == 80 and receiver.duplicates == 0
    first = receiver.counted[min(receiver.counted)]
    assert first.HasField("uj") and sum(s.uj for s in first.shares) == first.uj
    assert (tmp_path / "seq").read_text().strip().isdigit()
