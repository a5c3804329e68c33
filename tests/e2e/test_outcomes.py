"""Every answer is an outcome a client can act on (issue 22): a stopping
scheduler ends every call with a status (never CANCELLED), and every mutating
call is safe to send again (docs/USER-GUIDE.md, "When a call fails")."""

from __future__ import annotations

import queue
import threading
import time

import grpc
import pytest

from protos.pool.v1 import agent_pb2, claims_pb2, claims_pb2_grpc, ops_pb2, types_pb2

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
                done.wait(0.2)   # as a client does after UNAVAILABLE: another address, or a backoff

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
    assert "CANCELLED" not in " ".join(codes), [e for e in ended if "SHUTTING_DOWN" not in e[1]]
    watch = [(c, d) for c, d in ended if c.startswith("watch")]
    stream = [(c, d) for c, d in ended if c.startswith("stream")]
    assert watch and watch[0][0] == "watch UNAVAILABLE" and watch[0][1].startswith("SHUTTING_DOWN: "), ended
    assert stream and stream[0][0] == "stream UNAVAILABLE" and stream[0][1].startswith("SHUTTING_DOWN: "), ended
    # every submission ended with UNAVAILABLE: refused by the stopping scheduler, or no scheduler there
    assert {c for c in codes if not c.startswith(("watch", "stream"))} <= {"UNAVAILABLE"}, ended
    log = s.log()
    assert "Task exception was never retrieved" not in log and "CancelledError" not in log, log[-3000:]


def test_every_mutating_call_sent_again_answers_as_the_first_and_records_nothing(cluster):
    """What a client does with an unknown outcome: send the same request again.
    Each mutating call's second sending answers what the first did (or the
    state the first left) and adds no receipt."""
    from scheduler.ledger.witness import sign_statement

    s = cluster()
    s.register()
    length = lambda: s.ops.LedgerHead(ops_pb2.LedgerHeadRequest(), timeout=10).length  # noqa: E731

    def twice(call, request):
        first = call(request, timeout=10)
        before = length()
        second = call(request, timeout=10)
        assert length() == before, f"{request} sent again made a receipt"
        return first, second

    submit = claims_pb2.SubmitRequest(claim_id="c1", tenant="alpha", estimate_uj=J)
    first, second = twice(s.claims.Submit, submit)
    assert first == second
    many = claims_pb2.SubmitManyRequest(claims=[claims_pb2.SubmitRequest(claim_id=f"m{i}", tenant="beta",
                                                                         estimate_uj=J) for i in range(3)])
    first, second = twice(s.claims.SubmitMany, many)
    assert first == second
    first, second = twice(s.claims.Progress, claims_pb2.ProgressRequest(claim_id="c1", completed_units=7))
    assert first == second and second.completed_units == 7
    first, second = twice(s.claims.Release, claims_pb2.ReleaseRequest(claim_id="c1"))
    assert first == second and second.state == types_pb2.RELEASED
    first, second = twice(s.ops.Cordon, ops_pb2.CordonRequest(worker="w1", cordoned=True))
    assert first.cordoned and second.cordoned
    first, second = twice(s.ops.Cordon, ops_pb2.CordonRequest(worker="w1", cordoned=False))
    assert not first.cordoned and not second.cordoned
    first, second = twice(s.ops.Reclaim, ops_pb2.ReclaimRequest())
    assert list(second.reclaimed) == []
    first, second = twice(s.ops.Reclaim, ops_pb2.ReclaimRequest(claim_ids=["m0", "nobody"]))   # m0 is not idle
    assert list(first.reclaimed) == list(second.reclaimed) == []
    info = s.ops.LedgerHead(ops_pb2.LedgerHeadRequest(), timeout=10)
    statement = sign_statement(s.witness_key, s.steward.public, info.ledger_id, info.length, info.head)
    first, second = twice(s.as_principal("witness").ops.RecordWitness,
                          ops_pb2.RecordWitnessRequest(witness_receipt=statement))
    assert first == second and second.witnessed_length == info.length


def test_a_client_pinging_every_second_keeps_an_idle_watch(cluster):
    """The client library pings every second during a call, so that a frozen
    scheduler is noticed within the lease and 2 s (issue 22); the server
    permits it (grpc.http2.min_recv_ping_interval_without_data_ms) rather than
    closing the connection with too_many_pings after three."""
    s = cluster()
    options = [("grpc.keepalive_time_ms", 1000), ("grpc.keepalive_timeout_ms", 2000),
               ("grpc.http2.max_pings_without_data", 0)]   # ping on, however long the stream is quiet
    pki = s.pki
    channel = grpc.secure_channel(s.address, pki.credentials("operator"), options=options)
    events = claims_pb2_grpc.ClaimsStub(channel).Watch(claims_pb2.WatchRequest(tenant="alpha"), timeout=30)
    threading.Event().wait(6)   # idle: six pings with nothing else on the connection
    s.claims.Submit(claims_pb2.SubmitRequest(claim_id="late", tenant="alpha", estimate_uj=J), timeout=10)
    event = next(events)
    assert event.status.claim_id == "late"
    channel.close()


def test_the_checkpoint_cadence_counts_from_the_last_checkpoint_in_the_ledger(cluster):
    """checkpoint_every counts the ledger's receipts since its last checkpoint,
    whichever process wrote them: a scheduler restarted every few receipts
    (leaders changing often) still checkpoints (issue 22: 0 checkpoints in
    22,933 receipts)."""
    from scheduler.ledger.receipts import CHECKPOINT
    from scheduler.ledger.sqlite import SqliteStore

    s = cluster(checkpoint_every=10)
    for restart in range(6):
        for i in range(3):   # three receipts per process, far fewer than checkpoint_every
            s.claims.Submit(claims_pb2.SubmitRequest(claim_id=f"c{restart}-{i}", tenant="alpha", estimate_uj=J),
                            timeout=10)
        s.stop()
        s.start()
    s.stop()
    store = SqliteStore(s.ledger)
    try:
        at, length = store.latest(CHECKPOINT), store.length()
    finally:
        store.close()
    assert at is not None, "no checkpoint"
    assert length - (at + 1) < 10


IDLE_POLICY = """
[idle]
window_ns = 2_000_000_000
[[idle.thresholds]]
device_kind = "NVIDIA H200"
uw = 200_000_000
"""


def test_an_idle_claim_reclaimed_by_id_is_settled_once_however_often_the_reclaim_is_sent(cluster):
    """Reclaim naming its claims (claim_ids), through pool_client, sent again
    after an unknown outcome: the scheduler was killed once the first was
    durable, so the client never read its answer. The named idle claim is
    settled once, RECLAIMED; every sending answers it and the second records
    nothing; a busy claim named with it is left admitted."""
    s = cluster(extra=IDLE_POLICY)
    s.register("w1", gpus=2)
    client = s.as_principal("operator").library(timeout=30)
    devices = {}
    for claim_id, tenant in (("parked", "alpha"), ("working", "beta")):   # a GPU within each one's guarantee
        status = client.submit(claim_id=claim_id, tenant=tenant, resources=types_pb2.Resources(gpu_mdev=1000),
                               estimate_uj=J)
        assert status.state == types_pb2.ADMITTED, status
        (devices[claim_id],) = status.devices_mdev
    now, second = time.time_ns(), 1_000_000_000
    # 3 s of each GPU: the parked one at 1 W (below the 200 W threshold), the working one at 500 W
    s.stream("w1", [agent_pb2.Window(device_id=devices[c], seq=i + 1, start_ns=now - 3 * second, end_ns=now,
                                     uj=watts * 3 * J, grade=types_pb2.GRADE_HW_SHUNT)
                    for i, (c, watts) in enumerate((("parked", 1), ("working", 500)))])
    wait_for("the parked claim to be judged idle",
             lambda: list(client.reclamation_order().order) == ["parked"])
    head = lambda: client.ledger_head().length  # noqa: E731
    request = ops_pb2.ReclaimRequest(claim_ids=["parked", "working"])
    before = head()
    assert list(client.reclaim(request).reclaimed) == ["parked"]
    assert head() == before + 1, "one settlement"
    s.kill()   # the answer is lost with the scheduler: the client cannot know whether it was done
    s.start()
    length = head()
    again = client.reclaim(request)   # what a client does with an unknown outcome: the same request again
    assert list(again.reclaimed) == ["parked"]
    assert head() == length, "the second sending recorded nothing"
    assert client.get(claim_id="parked").state == types_pb2.RECLAIMED
    assert client.get(claim_id="working").state == types_pb2.ADMITTED
