"""The Engine in-process, on a real SQLite ledger: each event is applied once
(a schedule pass's own state is adopted), the live state equals the state a
replay of its ledger rebuilds, and reads see only what is durable."""

from __future__ import annotations

import asyncio
import itertools
import threading
from pathlib import Path

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protos.pool.v1 import types_pb2
from scheduler import kernel
from scheduler.kernel import (ClaimSpec, ClaimSubmitted, ConfigApplied, Device, Resources, Tenant, Worker,
                              WorkerRegistered)
from scheduler.ledger import cose, keys
from scheduler.ledger.receipts import read_core
from scheduler.ledger.sqlite import SqliteStore
from scheduler.ledger.steward import Steward
from scheduler.ledger.writer import GroupCommitWriter
from scheduler.service import state as service_state
from scheduler.service import engine as engine_module
from scheduler.service.engine import Engine
from scheduler.service.windows.batch import Windows
from scheduler.service.windows.occupancy import Holders, occupants

KEY = keys.generate()
TREE = (Tenant("root", guarantee_uj=10_000, guarantee_mdev=4000),
        Tenant("a", "root", guarantee_uj=6_000, guarantee_mdev=2000),
        Tenant("b", "root", guarantee_uj=4_000, guarantee_mdev=2000))
WORKERS = tuple(Worker(w, cpu_millis=8000, memory_mb=1 << 20, disk_mb=1 << 20,
                       devices=tuple(Device(f"{w}-gpu{i}", "H200") for i in range(2))) for w in ("w1", "w2"))
_fresh = itertools.count()


def opened(path: Path, checkpoint_every: int = 0, resume: bool = True) -> tuple[Engine, Steward]:
    """An engine on the ledger at `path`, replayed, as pool-scheduler opens it
    (from its last checkpoint; with resume=False, every receipt from genesis)."""
    engine = Engine(1000, checkpoint_every)
    steward = Steward.open(SqliteStore(path, create=True), KEY, engine.ledger_fold(resume))
    engine.start(GroupCommitWriter(steward))
    return engine, steward


async def close(engine: Engine, steward: Steward) -> None:
    await engine.writer.close()
    steward.close()


def latest(engine: Engine) -> kernel.ClusterState:
    """The engine's latest state, which no servicer can reach: a test looks."""
    return engine._latest.kernel


async def submit(engine: Engine, spec: ClaimSpec) -> None:
    await engine.decide(lambda latest: [a for a in [kernel.submit(latest.kernel, spec)]
                                        if isinstance(a, ClaimSubmitted)],
                        next(_fresh))


async def release(engine: Engine, claim_id: str) -> None:
    now = next(_fresh)
    await engine.decide(lambda latest: [a for a in [kernel.release(latest.kernel, claim_id, now)]
                                       if not isinstance(a, kernel.KernelError)], next(_fresh))


async def window(engine: Engine, worker: str, seq: int, uj: int) -> None:
    """One window on the worker's first GPU, its µJ split evenly between the
    claims on it (the remainder unallocated)."""
    state = engine.read().state
    holders = sorted(c for c in (state.loads[worker].active if worker in state.loads else ())
                     if any(d.device_id == f"{worker}-gpu0" for d in state.claims[c].devices))
    each = uj // (len(holders) + 1)
    occupants = [*holders, "unallocated"]
    share_uj = [each] * len(holders) + [uj - each * len(holders)]
    batch = Windows([f"{worker}-gpu0"], [seq], [seq * 10], [seq * 10 + 10], [uj], ["HwShunt"], [len(occupants)],
                    occupants, share_uj, ["ModelBased"] * len(occupants))
    await engine.record_windows(worker, lambda latest: batch, next(_fresh)).durable


def the_same(live: Engine, replayed: Engine, full: bool = False) -> None:
    assert replayed.read().service == live.read().service, "the whole service state, not the kernel's alone"
    for host in replayed.read().state.workers:
        # live records each host's last version of a commit, with the commit's final state;
        # replay every version, each with the state right after its receipt: the same weights
        recorded = live.occupancies.versions(host)
        if full:
            assert set(recorded) <= set(replayed.occupancies.versions(host))
        for version in set(recorded) & set(replayed.occupancies.versions(host)):
            assert replayed.occupancies.find(replayed.read().state, host, version, -1, 0).weights == \
                live.occupancies.find(live.read().state, host, version, -1, 0).weights, (host, version)
    assert live.read().service is live._latest, "once everything is durable, reads serve the latest state"


async def configured(engine: Engine, period_ns: int = 0) -> None:
    await engine.decide([ConfigApplied(TREE, period_ns=period_ns), *(WorkerRegistered(w) for w in WORKERS)], 0)


OPS = st.lists(st.one_of(
    st.tuples(st.just("submit"), st.sampled_from("ab"), st.integers(1, 5000), st.sampled_from([0, 500, 1000, 2000]),
              st.integers(-1, 1)),
    st.tuples(st.just("release"), st.integers(0, 30)),
    st.tuples(st.just("window"), st.sampled_from(["w1", "w2"]), st.integers(0, 3000)),
    st.tuples(st.just("progress"), st.integers(0, 30), st.integers(0, 9))), max_size=30)


async def drive(engine: Engine, ops: list[tuple], period_ns: int = 0) -> None:
    await configured(engine, period_ns)
    seqs = {"w1": 0, "w2": 0}
    for n, op in enumerate(ops):
        if op[0] == "submit":
            _, tenant, estimate, mdev, priority = op
            await submit(engine, ClaimSpec(f"c{n}", tenant, Resources(gpu_mdev=mdev), estimate_uj=estimate,
                                           priority=priority))
        elif op[0] == "release":
            await release(engine, f"c{op[1]}")
        elif op[0] == "window":
            seqs[op[1]] += 1
            await window(engine, op[1], seqs[op[1]], op[2])
        else:
            await engine.record(lambda latest: [e for e in [kernel.progress(latest.kernel, f"c{op[1]}", op[2])]
                                               if e is not None and not isinstance(e, kernel.KernelError)],
                                next(_fresh))   # (None: the count it has already)


@settings(max_examples=40)
@given(ops=OPS, checkpoint_every=st.sampled_from([0, 3]), period_ns=st.sampled_from([0, 9]))
def test_live_state_equals_the_replayed_state(tmp_path_factory, ops, checkpoint_every, period_ns):
    """The decisions adopt the schedule pass's own state; replay folds every
    receipt (or restores the last checkpoint and folds the rest): the same.
    With short accounting periods, checkpoints compact the claims of closed
    periods, live and in a full replay alike."""
    path = tmp_path_factory.mktemp("ledger") / "ledger.sqlite"

    async def run() -> None:
        live, steward = opened(path, checkpoint_every)
        await drive(live, ops, period_ns)
        await close(live, steward)
        for resume in (True, False):
            replayed, steward = opened(path, resume=resume)
            the_same(live, replayed, full=not resume)
            await close(replayed, steward)

    asyncio.run(run())


def test_a_decision_applies_each_event_once(tmp_path, monkeypatch):
    """decide applies the new events and runs the pass; nothing folds the
    pass's events again afterwards."""
    calls = []
    real = service_state.step
    monkeypatch.setattr(service_state, "step", lambda state, receipt: calls.append(receipt) or real(state, receipt))

    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite")
        calls.clear()
        await configured(engine)
        await submit(engine, ClaimSpec("x", "a", Resources(gpu_mdev=1000), estimate_uj=10))
        assert latest(engine).claims["x"].state is kernel.ClaimState.ADMITTED
        assert calls == [], "a decision's events are the pass's, adopted, not folded again"
        await close(engine, steward)

    asyncio.run(run())


def test_reads_see_a_change_only_once_its_receipts_are_durable(tmp_path):
    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite")
        await configured(engine)
        before = engine.read()
        told = []
        engine.listen(lambda change: told.append(engine.read().state.claim("x")))
        deciding = asyncio.ensure_future(submit(engine, ClaimSpec("x", "a", Resources(gpu_mdev=1000),
                                                                  estimate_uj=10)))
        await asyncio.sleep(0)   # the decision is made and queued; the ledger has not written it
        assert latest(engine).claims["x"].state is kernel.ClaimState.ADMITTED
        assert engine.read() is before and engine.read().state.claim("x") is None
        await deciding
        assert engine.read().state.claims["x"].state is kernel.ClaimState.ADMITTED
        assert engine.read().length == steward.length
        assert told and told[0] is not None, "listeners hear of a change after readers can see it"
        await close(engine, steward)

    asyncio.run(run())


def test_a_caller_that_goes_away_does_not_keep_the_change_from_readers(tmp_path):
    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite")
        await configured(engine)
        deciding = asyncio.ensure_future(submit(engine, ClaimSpec("x", "a", estimate_uj=10)))
        await asyncio.sleep(0)
        deciding.cancel()
        await engine.durable()
        assert engine.read().state.claims["x"].state is kernel.ClaimState.ADMITTED
        await close(engine, steward)

    asyncio.run(run())


def test_claims_decided_together_are_one_group_commit(tmp_path):
    """SubmitMany's accepted claims go to decide as one list: one pass, one
    transaction for all their receipts."""
    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite")
        await configured(engine)
        stored = []
        real = steward.store
        steward.store = lambda made: stored.append(len(made)) or real(made)
        state, events = engine.read().state, []
        for i in range(50):
            event = kernel.submit(state, ClaimSpec(f"c{i}", "ab"[i % 2], estimate_uj=10))
            state = kernel.apply(state, event)
            events.append(event)
        await engine.decide(events, 1)
        assert stored == [100], "50 submissions and 50 admissions in one transaction"
        assert engine.read().state == latest(engine) and len(latest(engine).admitted_by_tenant["a"]) == 25
        await close(engine, steward)

    asyncio.run(run())


def test_a_commit_records_one_occupancy_version_per_host(tmp_path):
    """A batch admitting many claims on one host changes its occupancy many
    times, but its agent is sent only where the commit leaves it: live, that
    one version is recorded (not one per receipt, each a copy of the host's
    whole occupancy), with the weights a replay gives the same receipt."""
    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite")
        await configured(engine)
        before = {w.worker_id: engine.occupancies.versions(w.worker_id) for w in WORKERS}
        state, events = engine.read().state, []
        for i in range(40):
            event = kernel.submit(state, ClaimSpec(f"c{i}", "ab"[i % 2], Resources(cpu_millis=100), estimate_uj=10))
            state = kernel.apply(state, event)
            events.append(event)
        await engine.decide(events, 1)
        hosts = {engine.read().state.claims[f"c{i}"].worker for i in range(40)}
        for host in hosts:
            assert engine.occupancies.versions(host) == [*before[host], engine.read().occupancy_seq[host]]
        await close(engine, steward)
        replayed, steward = opened(tmp_path / "ledger.sqlite", resume=False)
        the_same(engine, replayed, full=True)
        assert sum(len(replayed.occupancies.versions(h)) - len(before[h]) for h in hosts) == 40, \
            "replay records every version"
        await close(replayed, steward)

    asyncio.run(run())


def test_a_checkpoint_compacts_claims_of_closed_periods_and_keeps_the_figures(tmp_path):
    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite", checkpoint_every=1_000_000)
        await engine.decide([ConfigApplied(TREE, period_ns=1000, epoch_ns=0),
                             *(WorkerRegistered(w) for w in WORKERS)], 0)
        for claim_id in ("old", "withdrawn"):
            await engine.decide(lambda s: [kernel.submit(s.kernel, ClaimSpec(claim_id, "a", estimate_uj=10))], 10)
        await engine.decide(lambda s: [kernel.release(s.kernel, "old", 20)], 20)
        await engine.decide(lambda s: [kernel.release(s.kernel, "withdrawn", 30)], 30)
        await engine.decide(lambda s: [kernel.submit(s.kernel, ClaimSpec("open", "a", estimate_uj=10))], 1500)
        await engine.decide(lambda s: [kernel.submit(s.kernel, ClaimSpec("now", "a", estimate_uj=10))], 1600)
        await engine.decide(lambda s: [kernel.release(s.kernel, "now", 1700)], 1700)
        before = engine.read().state
        engine.checkpoint_every = 1
        await engine.record(lambda s: [], 1800)   # the next commit takes a checkpoint
        await engine.durable()
        state = engine.read().state
        assert set(state.claims) == {"open", "now"}, "what ended before this period began is gone"
        assert "old" not in engine.read().claim_seq and "now" in engine.read().claim_seq
        assert state.usage == before.usage and state.class_stats == before.class_stats
        assert kernel.rebuild(state) == state
        await close(engine, steward)
        for resume in (True, False):   # from the checkpoint, and every receipt from genesis
            replayed, steward = opened(tmp_path / "ledger.sqlite", resume=resume)
            the_same(engine, replayed)
            await close(replayed, steward)

    asyncio.run(run())


def test_checkpoints_taken_while_kept_encodings_follow_between_calls_restore_the_live_state(tmp_path, monkeypatch):
    """keep_encoded runs beside the commits (a pass every receipt here, a
    claim a step), checkpoints land in the middle of its passes: a start-up
    from the last checkpoint and a replay from genesis both rebuild the live
    state, and once the loop is idle the kept encodings are the latest
    state's, with no checkpoint taken."""
    monkeypatch.setattr(engine_module, "KEEP_EVERY", 1)

    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite", checkpoint_every=7)
        keeping = asyncio.create_task(engine.keep_encoded(chunk=1))
        await engine.decide([ConfigApplied(TREE), *(WorkerRegistered(w) for w in WORKERS)], 0)
        for n in range(40):
            await submit(engine, ClaimSpec(f"c{n}", "ab"[n % 2], Resources(gpu_mdev=100), estimate_uj=1))
            if n % 3 == 0:
                await engine.decide(lambda s: [kernel.release(s.kernel, f"c{n // 2}", 10 + n)], 10 + n)
            for _ in range(n % 4):
                await asyncio.sleep(0)
        await engine.durable()
        checkpoints = [raw for raw in steward.read() if read_core(cose.parse_whole(raw).payload)[0].kind == "checkpoint"]
        assert len(checkpoints) >= 5, "checkpoints were taken"
        for _ in range(10_000):   # idle: the pass in progress ends, and the one it was set for
            if engine._encoded.claims.entries._map is engine._latest.kernel.claims:
                break
            await asyncio.sleep(0)
        assert engine._encoded.claims.entries._map is engine._latest.kernel.claims
        keeping.cancel()
        await close(engine, steward)
        for resume in (True, False):   # from the last checkpoint, and every receipt from genesis
            replayed, steward = opened(tmp_path / "ledger.sqlite", resume=resume)
            the_same(engine, replayed)
            await close(replayed, steward)

    asyncio.run(run())


def test_a_checkpoint_chunk_that_cannot_be_stored_stops_the_ledger(tmp_path, monkeypatch):
    """No call waits for a spread checkpoint, so its failure is the engine's to
    notice: memory is then ahead of the ledger, and the next commit is refused."""
    from scheduler.ledger import steward as steward_module
    from scheduler.ledger.store import StoreError
    monkeypatch.setattr(steward_module, "CHUNK_BYTES", 64)

    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite", checkpoint_every=3)
        real_store = steward.store

        def store(made):
            if any(r.entry.kind == "checkpoint_chunk" and r.entry.body["index"] == 1 for r in made):
                raise StoreError("disk full")
            real_store(made)
        steward.store = store
        await configured(engine)   # more than 3 receipts: a checkpoint begins behind them
        await engine.writer.close()   # its chunks written, the one that fails included
        await asyncio.sleep(0)   # its future's callbacks
        assert isinstance(engine.failed, StoreError)
        with pytest.raises(engine_module.LedgerFailed):
            await submit(engine, ClaimSpec("x", "a", estimate_uj=10))
        steward.close()

    asyncio.run(run())


class Aborted(Exception):
    def __init__(self, code, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class Context:
    """What a unary handler uses of grpc.aio's context; abort raises, as grpc's does."""

    def set_trailing_metadata(self, metadata) -> None:
        pass

    async def abort(self, code, details: str):
        raise Aborted(code, details)


def test_a_refusal_is_told_only_once_the_state_it_was_judged_on_is_durable(tmp_path):
    """A second Release of a claim whose first Release is still being written
    must not answer from memory: if that write fails, the claim was never
    released, and the client, told it was, would not try again. It waits for
    the write (then answers the released status, as the first does); when the
    write fails, both calls (and every call after) are LEDGER_UNAVAILABLE. (Found by test_ha's PostgreSQL restart: a client
    retried its Release on the old leader between the failed append and its exit.)"""
    from protos.pool.v1 import claims_pb2
    from scheduler.ledger.store import StoreError
    from scheduler.service.claims import ClaimsServicer

    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite")
        engine.ready = True
        await configured(engine)
        claims = ClaimsServicer(engine)
        for claim_id in ("x", "y"):
            await claims.Submit(claims_pb2.SubmitRequest(claim_id=claim_id, tenant="a", estimate_uj=10), Context())
        written = steward.store
        gate, outcome = threading.Event(), {"fail": False}
        loop, storing, waiting = asyncio.get_running_loop(), asyncio.Event(), asyncio.Event()
        real_durable = engine.durable

        async def durable():   # a call waits for what is in flight: the refusal's wait, seen exactly
            waiting.set()
            await real_durable()

        engine.durable = durable

        def store(made):
            loop.call_soon_threadsafe(storing.set)   # the store has the receipts, and holds them
            gate.wait(10)
            if outcome["fail"]:
                raise StoreError("terminating connection due to administrator command")
            written(made)

        steward.store = store
        for claim_id, fail in (("x", False), ("y", True)):
            gate.clear()
            storing.clear()
            waiting.clear()
            outcome["fail"] = fail
            first = asyncio.ensure_future(claims.Release(claims_pb2.ReleaseRequest(claim_id=claim_id), Context()))
            await storing.wait()   # decided and queued; the store has not written it
            assert latest(engine).claims[f"a/{claim_id}"].state is kernel.ClaimState.RELEASED   # keyed TENANT/ID
            again = asyncio.ensure_future(claims.Release(claims_pb2.ReleaseRequest(claim_id=claim_id), Context()))
            await waiting.wait()   # refused on the latest state, and waiting for it to be durable
            assert not again.done(), "the refusal waits for the release it was judged on"
            gate.set()
            if not fail:   # sent again by the same caller: the status the first answers, once durable
                assert (await first).state == types_pb2.RELEASED
                assert await again == await first
                continue
            for call in (first, again):
                with pytest.raises(Aborted, match="^LEDGER_UNAVAILABLE: ") as told:
                    await call
                assert told.value.code == grpc.StatusCode.UNAVAILABLE
            for late in (claims.Release(claims_pb2.ReleaseRequest(claim_id=claim_id), Context()),
                         claims.Get(claims_pb2.GetClaimRequest(claim_id=claim_id), Context())):
                with pytest.raises(Aborted, match="^LEDGER_UNAVAILABLE: "):
                    await late   # memory is ahead of the ledger: nothing is told from it
        steward.store = written
        steward.close()

    asyncio.run(run())


@settings(max_examples=25)
@given(ops=OPS)
def test_the_kept_occupants_are_the_hosts_occupants(tmp_path_factory, ops):
    """occupancy.Holders, asked at every batch folded and every occupancy
    recorded through random submissions, releases and windows, answers what
    occupants() computes from the state there and then; and no answer
    handed out changes afterwards (the engine asks inside its edit batches)."""
    path = tmp_path_factory.mktemp("ledger") / "ledger.sqlite"
    asked, handed = [], []
    real = Holders.__call__

    def checked(self, state, host):
        got = real(self, state, host)
        plain = {key: dict(holders.items()) for key, holders in got.items()}
        assert plain == occupants(state, host)
        asked.append(bool(got))
        handed.append((got, plain))
        return got

    async def run() -> None:
        engine, steward = opened(path)
        await drive(engine, ops)
        await close(engine, steward)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Holders, "__call__", checked)
        asyncio.run(run())
    assert asked or not any(op[0] == "window" for op in ops)
    assert all({key: dict(holders.items()) for key, holders in got.items()} == plain for got, plain in handed)
