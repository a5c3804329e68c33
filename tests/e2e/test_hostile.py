"""A hostile client against a real scheduler (issue 12): random but
well-formed Submit, Release, Progress, Register and Stream messages with
hostile contents. Never UNKNOWN, never a crash, every refusal a stable
`CODE: sentence` that leaves no receipt; and the state the ledger then
replays to keeps the kernel's invariants."""

from __future__ import annotations

import queue
import threading
import time

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protos.pool.v1 import agent_pb2, claims_pb2, ops_pb2, types_pb2
from scheduler.kernel import rebuild
from scheduler.ledger.fold import replay
from scheduler.ledger.sqlite import SqliteStore
from scheduler.service.state import ServiceState, fold_entry

SECOND = 1_000_000_000
U64 = (1 << 64) - 1
CODES = set(types_pb2.ErrorCode.keys())

ids = st.one_of(st.sampled_from(["c1", "c2", "g", "unallocated", "", "x" * 129, "a b", "é", "h1-gpu0"]),
                st.text(min_size=0, max_size=200))
naturals = st.one_of(st.sampled_from([0, 1, 250, 1000, 2000, 10 ** 12, U64]), st.integers(0, U64))
enums = st.integers(0, 200)

submits = st.builds(
    lambda claim_id, tenant, gang_id, gang_size, cpu, mdev, types, placement, estimate, work_class, priority:
    ("submit", claims_pb2.SubmitRequest(
        claim_id=claim_id, tenant=tenant, gang_id=gang_id, gang_size=gang_size, placement=placement,
        resources=types_pb2.Resources(cpu_millis=cpu, gpu_mdev=mdev, gpu_types=types), work_class=work_class,
        priority=priority, **({} if estimate is None else {"estimate_uj": estimate}))),
    ids, st.sampled_from(["alpha", "beta", "root", "nobody", ""]), st.one_of(st.just(""), ids),
    st.integers(0, 2 ** 32 - 1), naturals, naturals, st.lists(ids, max_size=20), enums, st.none() | naturals,
    st.one_of(st.just(""), ids), st.integers(-(2 ** 31), 2 ** 31 - 1))
releases = st.builds(lambda c: ("release", claims_pb2.ReleaseRequest(claim_id=c)), ids)
progresses = st.builds(lambda c, u: ("progress", claims_pb2.ProgressRequest(claim_id=c, completed_units=u)),
                       ids, naturals)
registers = st.builds(
    lambda devices, cpu: ("register", agent_pb2.RegisterRequest(
        host_id="h2", capacity=types_pb2.Capacity(resources=types_pb2.Resources(cpu_millis=cpu)),
        devices=[types_pb2.DeviceMeter(device_id=d, kind=k, device_type=t) for d, k, t in devices])),
    st.lists(st.tuples(ids, enums, st.sampled_from(["NVIDIA H200", "", "x" * 65])), max_size=4), naturals)
def _start(start: int | None) -> int:
    """None draws "about now", so that some windows reach the later rules."""
    return time.time_ns() - 30 * SECOND if start is None else start


window = st.builds(
    lambda device, seq, start, length, uj, grade, version, shares: agent_pb2.Window(
        device_id=device, seq=seq, start_ns=_start(start), end_ns=min(U64, _start(start) + length), grade=grade,
        occupancy_version=version,
        shares=[types_pb2.Share(occupant=o, uj=u, grade=g) for o, u, g in shares], **({} if uj is None else {"uj": uj})),
    st.sampled_from(["h2-gpu0", "h2-gpu1", "cpu:0", "ghost"]), naturals,
    st.one_of(st.just(0), st.just(None), naturals), st.sampled_from([0, 1, SECOND, U64 // 2]), st.none() | naturals,
    enums, st.sampled_from([0, 1, U64]), st.lists(st.tuples(ids, naturals, enums), max_size=3))
streams = st.builds(lambda windows: ("stream", windows), st.lists(window, min_size=1, max_size=4))
operations = st.lists(st.one_of(submits, releases, progresses, registers, streams), min_size=1, max_size=6)


def drain(call) -> None:
    """Read a stream's answers until it ends; the fixture's own cancel is how it ends."""
    try:
        for _ in call:
            pass
    except grpc.RpcError as error:
        if error.code() != grpc.StatusCode.CANCELLED:
            raise


@pytest.fixture(scope="module")
def target(tmp_path_factory, harness):
    s = harness.Scheduler(tmp_path_factory.mktemp("hostile")).start()
    for host in ("h1", "h2"):
        s.agents.Register(agent_pb2.RegisterRequest(host_id=host, capacity=types_pb2.Capacity(
            resources=types_pb2.Resources(cpu_millis=64_000, memory_mb=1 << 20, disk_mb=1 << 20, gpu_mdev=2000)),
            devices=[types_pb2.DeviceMeter(device_id=f"{host}-gpu{i}", kind=types_pb2.GPU, device_type="NVIDIA H200")
                     for i in range(2)]), timeout=10)
    keep: queue.Queue = queue.Queue()   # h1 streams (and stays live) for the whole run
    keep.put(agent_pb2.AgentMessage(hello=agent_pb2.Hello(host_id="h1")))
    call = s.agents.Stream(iter(keep.get, None), timeout=600)
    threading.Thread(target=drain, args=(call,), daemon=True).start()
    yield s
    keep.put(None)
    call.cancel()
    s.stop()


def _head(s) -> tuple:
    head = s.ops.LedgerHead(ops_pb2.LedgerHeadRequest(), timeout=10)
    return head.length, head.head


def _call(s, kind: str, payload):
    if kind == "submit":
        return s.claims.Submit(payload, timeout=20)
    if kind == "release":
        return s.claims.Release(payload, timeout=20)
    if kind == "progress":
        return s.claims.Progress(payload, timeout=20)
    if kind == "register":
        return s.agents.Register(payload, timeout=20)
    messages = [agent_pb2.AgentMessage(hello=agent_pb2.Hello(host_id="h2")),
                agent_pb2.AgentMessage(batch=agent_pb2.WindowBatch(windows=payload))]
    for _ in s.agents.Stream(iter(messages), timeout=20):
        pass   # the stream ends when the batch is answered (the iterator runs out) or refused


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(operations)
def test_a_hostile_client_gets_stable_refusals_that_change_nothing(target, ops):
    s = target
    for kind, payload in ops:
        before = _head(s)
        try:
            _call(s, kind, payload)
        except grpc.RpcError as error:
            code, details = error.code(), error.details() or ""
            if kind == "stream" and code == grpc.StatusCode.CANCELLED:
                continue   # our side closed a stream whose batch was taken
            assert code not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), details
            assert details.split(":", 1)[0] in CODES, details
            assert _head(s) == before, f"{kind} refused ({details}) but the ledger moved"
        assert s.serving()


def test_the_ledger_a_hostile_client_leaves_replays_to_a_sound_state(target):
    """After the run above: the ledger verifies, and the state it replays to equals
    its own full rebuild and keeps the root within its guarantees."""
    store = SqliteStore(target.ledger)
    try:
        state = replay(store, fold_entry, ServiceState()).kernel   # LedgerInvalid unless every receipt verifies
    finally:
        store.close()
    assert rebuild(state) == state
    root = state.tree.nodes[state.tree.root]
    assert state.usage[state.tree.root].devices.total <= root.guarantee_mdev
