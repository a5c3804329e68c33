"""Every answer is an outcome a client can act on (issue 22): a stopping
scheduler ends every call with a status (never CANCELLED), and every mutating
call is safe to send again (docs/USER-GUIDE.md, "When a call fails")."""

from __future__ import annotations

import queue
import threading

import grpc
import pytest

from protos.pool.v1 import agent_pb2, claims_pb2, ops_pb2

from .conftest import J, wait_for


def answers_during(scheduler, stop) -> tuple[list, list]:
    """Submits from two threads, an agent's stream and a Watch, all running
    while `stop()` stops the scheduler; (the codes and details every failed
    call and stream ended with, the Watch's events)."""
    ended: list[tuple[str, str]] = []
    events: list = []
    done = threading.Event()

    def submitting(n: int) -> None:
        i = 0
        while not done.is_set():
            i += 1
            try:
                scheduler.claims.Submit(claims_pb2.SubmitRequest(claim_id=f"s{n}-{i}", tenant="alpha",
                                                                 estimate_uj=J), timeout=10)
            except grpc.RpcError as error:
                ended.append((error.code().name, error.details() or ""))
                if error.code() != grpc.StatusCode.UNAVAILABLE or not (error.details() or "").startswith(
                        "SHUTTING_DOWN"):
                    return   # the port is closed (or something unexpected): the assertion below says which

    def watching() -> None:
        try:
            for event in scheduler.claims.Watch(claims_pb2.WatchRequest(tenant="alpha"), timeout=60):
                events.append(event)
        except grpc.RpcError as error:
            ended.append((f"watch {error.code().name}", error.details() or ""))

    up: queue.Queue = queue.Queue()
    up.put(agent_pb2.AgentMessage(hello=agent_pb2.Hello(host_id="w1")))

    def streaming() -> None:
        try:
            for _ in scheduler.agents.Stream(iter(up.get, None), timeout=60):
                pass
        except grpc.RpcError as error:
            ended.append((f"stream {error.code().name}", error.details() or ""))

    threads = [threading.Thread(target=t, args=a) for t, a in
               ((submitting, (1,)), (submitting, (2,)), (watching, ()), (streaming, ()))]
    for thread in threads:
        thread.start()
    wait_for("submissions to be watched", lambda: len(events) > 20)
    stop()
    done.set()
    for thread in threads:
        thread.join(timeout=30)
    up.put(None)
    return ended, events


def test_a_stopping_scheduler_ends_every_call_and_stream_with_a_status_never_cancelled(cluster):
    s = cluster()
    s.register()
    ended, _ = answers_during(s, lambda: s.stop())
    codes = [code for code, _ in ended]
    assert "CANCELLED" not in " ".join(codes), ended
    watch = [(c, d) for c, d in ended if c.startswith("watch")]
    stream = [(c, d) for c, d in ended if c.startswith("stream")]
    assert watch and watch[0][0] == "watch UNAVAILABLE" and watch[0][1].startswith("SHUTTING_DOWN: "), ended
    assert stream and stream[0][0] == "stream UNAVAILABLE" and stream[0][1].startswith("SHUTTING_DOWN: "), ended
    # every submission ended with UNAVAILABLE: refused by the stopping scheduler, or no scheduler there
    assert {c for c in codes if not c.startswith(("watch", "stream"))} <= {"UNAVAILABLE"}, ended
    log = s.log()
    assert "Task exception was never retrieved" not in log and "CancelledError" not in log, log[-3000:]
