"""The Engine in-process, on a real SQLite ledger: each event is applied once
(a schedule pass's own state is adopted), the live state equals the state a
replay of its ledger rebuilds, and reads see only what is durable."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import kernel
from scheduler.kernel import (ClaimSpec, ClaimSubmitted, ConfigApplied, Device, Resources, Tenant, Worker,
                              WorkerRegistered)
from scheduler.ledger import keys
from scheduler.ledger.fold import Fold
from scheduler.ledger.sqlite import SqliteStore
from scheduler.ledger.steward import Steward
from scheduler.ledger.writer import GroupCommitWriter
from scheduler.service.engine import Engine
from scheduler.service.observed import Windows

KEY = keys.generate()
TREE = (Tenant("root", guarantee_uj=10_000, guarantee_mdev=4000),
        Tenant("a", "root", guarantee_uj=6_000, guarantee_mdev=2000),
        Tenant("b", "root", guarantee_uj=4_000, guarantee_mdev=2000))
WORKERS = tuple(Worker(w, cpu_millis=8000, memory_mb=1 << 20, disk_mb=1 << 20,
                       devices=tuple(Device(f"{w}-gpu{i}", "H200") for i in range(2))) for w in ("w1", "w2"))
_fresh = itertools.count()


def opened(path: Path, checkpoint_every: int = 0) -> tuple[Engine, Steward]:
    """An engine on the ledger at `path`, replayed, as pool-scheduler opens it."""
    engine = Engine(1000, checkpoint_every)
    steward = Steward.open(SqliteStore(path, create=True), KEY,
                           Fold(engine.replay_entry, engine, restore=engine.restore))
    engine.start(GroupCommitWriter(steward))
    return engine, steward


async def close(engine: Engine, steward: Steward) -> None:
    await engine.writer.close()
    steward.close()


async def submit(engine: Engine, spec: ClaimSpec) -> None:
    answer = kernel.submit(engine.state, spec)
    if isinstance(answer, ClaimSubmitted):
        await engine.decide([answer], next(_fresh))


async def release(engine: Engine, claim_id: str) -> None:
    answer = kernel.release(engine.state, claim_id, next(_fresh))
    if not isinstance(answer, kernel.KernelError):
        await engine.decide([answer], next(_fresh))


async def window(engine: Engine, worker: str, seq: int, uj: int) -> None:
    """One window on the worker's first GPU, its µJ split evenly between the
    claims on it (the remainder unallocated)."""
    holders = sorted(c for c in (engine.state.loads[worker].active if worker in engine.state.loads else ())
                     if any(d.device_id == f"{worker}-gpu0" for d in engine.state.claims[c].devices))
    each = uj // (len(holders) + 1)
    occupants = [*holders, "unallocated"]
    share_uj = [each] * len(holders) + [uj - each * len(holders)]
    batch = Windows([f"{worker}-gpu0"], [seq], [seq * 10], [seq * 10 + 10], [uj], ["HwShunt"], [len(occupants)],
                    occupants, share_uj, ["ModelBased"] * len(occupants))
    await engine.record_windows(worker, batch, next(_fresh))


def the_same(live: Engine, replayed: Engine) -> None:
    assert replayed.state == live.state
    assert replayed.claim_seq == live.claim_seq
    assert replayed.occupancy_seq == live.occupancy_seq
    assert live.committed.state is live.state, "once everything is durable, reads serve the latest state"


async def configured(engine: Engine) -> None:
    await engine.decide([ConfigApplied(TREE), *(WorkerRegistered(w) for w in WORKERS)], 0)


OPS = st.lists(st.one_of(
    st.tuples(st.just("submit"), st.sampled_from("ab"), st.integers(1, 5000), st.sampled_from([0, 500, 1000, 2000]),
              st.integers(-1, 1)),
    st.tuples(st.just("release"), st.integers(0, 30)),
    st.tuples(st.just("window"), st.sampled_from(["w1", "w2"]), st.integers(0, 3000)),
    st.tuples(st.just("progress"), st.integers(0, 30), st.integers(0, 9))), max_size=30)


async def drive(engine: Engine, ops: list[tuple]) -> None:
    await configured(engine)
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
            event = kernel.progress(engine.state, f"c{op[1]}", op[2])
            if not isinstance(event, kernel.KernelError):
                await engine.commit([(event.kind, event.to_body(), event)], next(_fresh))


@settings(max_examples=40)
@given(ops=OPS, checkpoint_every=st.sampled_from([0, 3]))
def test_live_state_equals_the_replayed_state(tmp_path_factory, ops, checkpoint_every):
    """The decisions adopt the schedule pass's own state; replay folds every
    receipt (or restores the last checkpoint and folds the rest): the same."""
    path = tmp_path_factory.mktemp("ledger") / "ledger.sqlite"

    async def run() -> None:
        live, steward = opened(path, checkpoint_every)
        await drive(live, ops)
        await close(live, steward)
        replayed, steward = opened(path)
        the_same(live, replayed)
        await close(replayed, steward)

    asyncio.run(run())


def test_a_decision_applies_each_event_once(tmp_path, monkeypatch):
    """decide applies the new events and runs the pass; nothing folds the
    pass's events again afterwards."""
    calls = []
    real = Engine.fold
    monkeypatch.setattr(Engine, "fold", lambda self, *args, **kw: calls.append(args[0]) or real(self, *args, **kw))

    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite")
        calls.clear()
        await configured(engine)
        await submit(engine, ClaimSpec("x", "a", Resources(gpu_mdev=1000), estimate_uj=10))
        assert engine.state.claims["x"].state is kernel.ClaimState.ADMITTED
        assert calls == [], "a decision's events are the pass's, adopted, not folded again"
        await close(engine, steward)

    asyncio.run(run())


def test_reads_see_a_change_only_once_its_receipts_are_durable(tmp_path):
    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite")
        await configured(engine)
        before = engine.committed
        told = []
        engine.listen(lambda change: told.append(engine.committed.state.claim("x")))
        deciding = asyncio.ensure_future(submit(engine, ClaimSpec("x", "a", Resources(gpu_mdev=1000),
                                                                  estimate_uj=10)))
        await asyncio.sleep(0)   # the decision is made and queued; the ledger has not written it
        assert engine.state.claims["x"].state is kernel.ClaimState.ADMITTED
        assert engine.committed is before and engine.committed.state.claim("x") is None
        await deciding
        assert engine.committed.state.claims["x"].state is kernel.ClaimState.ADMITTED
        assert engine.committed.length == steward.length
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
        assert engine.committed.state.claims["x"].state is kernel.ClaimState.ADMITTED
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
        state, events = engine.state, []
        for i in range(50):
            event = kernel.submit(state, ClaimSpec(f"c{i}", "ab"[i % 2], estimate_uj=10))
            state = kernel.apply(state, event)
            events.append(event)
        await engine.decide(events, 1, state)
        assert stored == [100], "50 submissions and 50 admissions in one transaction"
        assert engine.committed.state == engine.state and len(engine.state.open_by_tenant["a"]) == 25
        await close(engine, steward)

    asyncio.run(run())
