"""Streaming to a real loopback gRPC server that is stopped and restarted."""

from __future__ import annotations

import threading
import time

import pytest

from agent.loopback import LoopbackReceiver, serve
from agent.metrics import AgentMetrics
from agent.spool import Spool
from agent.stream import Backoff, StreamClient
from agent.windows import Window
from protos.energy import Grade
from protos.pool.v1 import agent_pb2


def windows(seqs, uj=1000):
    return [Window("GPU-1", s, s * 10**9, (s + 1) * 10**9, uj, Grade.HwShunt, uj) for s in seqs]


def client_for(port, spool, metrics):
    register = lambda: agent_pb2.RegisterRequest(host_id="host-a", window_ns=10**9)  # noqa: E731
    return StreamClient(f"127.0.0.1:{port}", register, spool, metrics, batch_max=50, backoff=Backoff(0.02, 0.2))


@pytest.mark.slow
def test_every_window_arrives_exactly_once_across_a_server_restart(tmp_path):
    receiver, metrics = LoopbackReceiver(), AgentMetrics()
    server, port = serve(receiver)
    outbox = Spool(tmp_path / "spool.sqlite", 10_000, metrics)
    client = client_for(port, outbox, metrics)
    threading.Thread(target=client.run, daemon=True).start()
    produced = iter(range(1, 601))

    def produce(n):
        for _ in range(n // 10):
            outbox.append(windows([next(produced) for _ in range(10)]), {})
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
    assert metrics.registry.get_sample_value("pool_agent_buffered_windows") == 0


def test_resend_starts_above_the_schedulers_acked_seq_and_numbers_continue_above_it(tmp_path):
    receiver, metrics = LoopbackReceiver(), AgentMetrics()
    receiver.acked = 5  # already counted before this agent restarted
    server, port = serve(receiver)
    path = tmp_path / "spool.sqlite"
    used = Spool(path, 100, metrics)
    used.resolved(0)                    # a scheduler has answered this spool once: its numbers are its own
    used.close()
    outbox = Spool(path, 100, metrics)
    outbox.append(windows(range(6)), {})   # renumbered by the spool: 1..6
    outbox.resolved(3)                     # a Register before the crash had counted 1..3
    assert [w.seq for w in outbox.offer(0, 100, 0)] == [4, 5, 6]
    client = client_for(port, outbox, metrics)
    threading.Thread(target=client.run, daemon=True).start()
    assert receiver.wait_for(6, 10)
    client.close()
    server.stop(0)
    assert sorted(receiver.counted) == [6] and receiver.duplicates == 0
    assert outbox.append(windows([0]), {})[0].seq == 7   # Register said 5 was counted: never reuse it


def test_a_fresh_spool_renumbers_above_what_the_scheduler_counted(tmp_path):
    spool = Spool(tmp_path / "spool.sqlite", 100, AgentMetrics())   # state_dir lost: numbers restart at 1
    spool.append(windows(range(3)), {})
    spool.resolved(40)
    assert [w.seq for w in spool.offer(0, 100, 0)] == [41, 42, 43]
    assert spool.append(windows([0]), {})[0].seq == 44


def test_backoff_grows_with_jitter_up_to_the_cap_and_resets():
    backoff = Backoff(0.5, 4.0)
    delays = [backoff.next() for _ in range(6)]
    for n, d in enumerate(delays):
        ceiling = min(4.0, 0.5 * 2 ** n)
        assert ceiling / 2 <= d <= ceiling
    backoff.reset()
    assert backoff.next() <= 0.5


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
    assert Spool(tmp_path / "spool.sqlite", 10, AgentMetrics()).last_readings()   # the counter, for a restart
