"""Replay: the state after any sequence of appends equals the state replayed from
the ledger; checkpoints let start-up verify only the tail."""

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.ledger import cose, dcbor, keys, receipts, witness
from scheduler.ledger import steward as steward_module
from scheduler.ledger.fold import CheckpointMismatch, Fold, Folder, replay
from scheduler.ledger.steward import Steward, open_ledger
from scheduler.ledger.writer import GroupCommitWriter
from scheduler.ledger.verify import LedgerInvalid, verify


def apply(state: dict, entry) -> dict:
    """A stand-in for the kernel's fold: µJ per tenant, claims open per tenant."""
    tenant, uj = entry.body["tenant"], entry.body["uj"]
    state = dict(state)
    if entry.kind == "claim.admitted":
        state[f"{tenant}/open"] = state.get(f"{tenant}/open", 0) + 1
        state[tenant] = state.get(tenant, 0) + uj
    elif entry.kind == "claim.released":
        state[f"{tenant}/open"] = state.get(f"{tenant}/open", 0) - 1
        state[tenant] = state.get(tenant, 0) - uj
    return state


FOLD = Fold(apply, {}, restore=dict, snapshot=dict)
operations = st.lists(st.one_of(
    st.tuples(st.sampled_from(["claim.admitted", "claim.released", "metered"]),
              st.sampled_from(["a", "b", "a/x"]), st.integers(0, 10**12)),
    st.just(("checkpoint", "", 0))), max_size=30)


def run(steward: Steward, ops) -> dict:
    state = FOLD.initial
    for kind, tenant, uj in ops:
        if kind == "checkpoint":
            steward.checkpoint(FOLD.snapshot(state))
        else:
            state = FOLD.apply(state, steward.append(kind, {"tenant": tenant, "uj": uj}).entry)
    return state


@given(ops=operations)
def test_live_state_equals_replayed_state(new_memory_store, ops):
    store, key = new_memory_store(), keys.generate()
    live = run(Steward.open(store, key), ops)
    assert replay(store, apply, {}, key=key.public, snapshot=dict, workers=1) == live
    assert Steward.open(store, key, FOLD, workers=1).state == live


def test_replay_from_sqlite_after_reopen(tmp_path, steward_key):
    ops = [("claim.admitted", "a", 5), ("checkpoint", "", 0), ("claim.released", "a", 5),
           ("claim.admitted", "b", 7)]
    live = run(open_ledger(tmp_path / "l.db", steward_key), ops)
    reopened = open_ledger(tmp_path / "l.db", steward_key, FOLD)
    assert reopened.state == live == {"a": 0, "a/open": 0, "b": 7, "b/open": 1}
    assert replay(reopened.read(), apply, {}, workers=1) == live


def _tamper(store, index):
    """Flip a bit of the receipt's signature."""
    kind, raw = store.rows[index]
    store.rows[index] = (kind, raw[:-1] + bytes([raw[-1] ^ 1]))


def test_a_checkpoint_start_verifies_only_the_tail(memory_store, steward_key):
    steward = Steward.open(memory_store, steward_key)
    run(steward, [("claim.admitted", "a", 1)] * 3 + [("checkpoint", "", 0)]
        + [("claim.admitted", "b", 2)] * 2)
    _tamper(memory_store, 2)        # before the checkpoint: start-up does not look
    assert Steward.open(memory_store, steward_key, FOLD).state == {"a": 3, "a/open": 3, "b": 4,
                                                                  "b/open": 2}
    with pytest.raises(LedgerInvalid) as err:   # a full verification does
        Steward.open(memory_store, steward_key)
    assert err.value.report.first_bad_index == 2
    _tamper(memory_store, 5)        # after the checkpoint: refused at start-up
    with pytest.raises(LedgerInvalid) as err:
        Steward.open(memory_store, steward_key, FOLD)
    assert (err.value.report.first_bad_index, err.value.report.reason) == (5, "signature")


def test_a_checkpoint_that_lies_is_caught_by_a_full_replay(memory_store, steward_key):
    steward = Steward.open(memory_store, steward_key)
    run(steward, [("claim.admitted", "a", 1)])
    steward.checkpoint({"a": 1000})
    with pytest.raises(CheckpointMismatch):
        replay(memory_store, apply, {}, snapshot=dict, workers=1)


def test_appends_refuse_what_cannot_be_a_receipt(memory_store, steward_key):
    steward = Steward.open(memory_store, steward_key)
    for kind, body in [("genesis", {}), ("witness", {}), ("", {}), ("x", {"f": 1.5}),
                       ("x", {1: 2}), ("x", [1])]:
        with pytest.raises(ValueError):
            steward.append(kind, body)
    assert steward.length == 1
    with pytest.raises(dcbor.DcborError):
        steward.checkpoint({"x": 0.5})


def test_parallel_replay_folds_every_entry_and_sees_witnesses(build, steward_key):
    admitted = [("claim.admitted", {"tenant": "a", "uj": 1})] * 2999
    prefix = build(admitted)
    statement = witness.sign_statement(keys.generate(), steward_key.public, receipts.digest(prefix[0]),
                                       3000, receipts.digest(prefix[-1]))
    ledger = build(admitted + [("witness", {"statement": statement})]
                   + [("claim.released", {"tenant": "a", "uj": 1})] * 100)
    assert replay(ledger, apply, {}, workers=2) == {"a": 2899, "a/open": 2899}
    report = verify(ledger, workers=2)
    assert report.valid and report.witnessed_length == 3000


def test_a_checkpoint_larger_than_the_core_cap_is_chunked_and_restored(memory_store, steward_key):
    """docs/LEDGER.md §9: the state in CHUNK_BYTES pieces, each its own receipt,
    then the checkpoint receipt signing their count, size and digest."""
    from scheduler.ledger.steward import CHUNK_BYTES
    steward = Steward.open(memory_store, steward_key)
    run(steward, [("claim.admitted", "a", 1)])
    big = {"a": 1, "a/open": 1, "blob": [bytes(1 << 20)] * 9}   # over the 8 MiB cap of one core
    head = steward.checkpoint(big)
    kinds = [kind for kind, _ in memory_store.rows]
    size = len(dcbor.encode(big, limit=None))
    chunks = -(-size // CHUNK_BYTES)
    assert kinds[2:] == ["checkpoint_chunk"] * chunks + ["checkpoint"]
    assert head.entry.body["chunks"] == chunks and head.entry.body["size"] == size > dcbor.MAX_BYTES
    assert head.entry.body["first_chunk"] == 2
    assert all(len(r) < dcbor.MAX_BYTES for _, r in memory_store.rows)
    steward.append("claim.admitted", {"tenant": "b", "uj": 2})
    _tamper(memory_store, 1)   # before the checkpoint's first chunk: start-up does not look
    restored = Steward.open(memory_store, steward_key, Fold(apply, {}, restore=dict))
    assert restored.state == {**big, "b": 2, "b/open": 1}


def test_chunks_that_are_not_what_the_checkpoint_signs_stop_start_up(memory_store, steward_key):
    steward = Steward.open(memory_store, steward_key)
    wrong_chunk, head = list(steward.prepare_checkpoint({"a": 1}, 1))[0], list(steward.prepare_checkpoint({"a": 2}, 1))[-1]
    steward.commit([wrong_chunk, head])   # a steward that signed chunks of another state
    report = verify(memory_store.read(), steward_key.public)   # well signed and chained, and wrong:
    assert (report.reason, report.first_bad_index, report.signatures_ok, report.chain_ok) == ("body", 2, True, True)
    with pytest.raises(LedgerInvalid, match=r"receipt 2: body: checkpoint: its chunks' 4 bytes are not the size and SHA-256"):
        Steward.open(memory_store, steward_key, Fold(apply, {}, restore=dict))


def compact(state: dict) -> dict:
    """A stand-in for the scheduler's compaction: tenants with nothing open are dropped."""
    return {k: v for k, v in state.items() if not (k.endswith("/open") and v == 0) and state.get(f"{k}/open") != 0}


SPREAD = Fold(apply, {}, restore=dict, snapshot=dict, compact=compact)
spread_ops = st.lists(st.one_of(
    st.tuples(st.sampled_from(["claim.admitted", "claim.released"]), st.sampled_from(["a", "b"]),
              st.integers(0, 10**6)),
    st.just(("begin", "", 0)), st.just(("piece", "", 0))), max_size=40)


@given(ops=spread_ops)
def test_a_checkpoint_spread_among_later_receipts_restores_the_state_it_was_taken_at(new_memory_store, ops):
    """docs/LEDGER.md §9: a checkpoint holds the state before its first chunk,
    compacted there; its other chunks and its receipt come later, among other
    receipts, and a checkpoint a crash left unfinished is compacted at too.
    Start-up from the last checkpoint, a full replay and the audit of every
    checkpoint all end at the live state."""
    store, key = new_memory_store(), keys.generate()
    steward, state, plain, writing = Steward.open(store, key), {}, {}, None   # plain: never compacted
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(steward_module, "CHUNK_BYTES", 4)   # several chunks for any state
        for kind, tenant, uj in ops:
            if kind == "begin" and writing is None:
                state = compact(state)
                writing = steward.prepare_checkpoint(dict(state), steward.length)
                steward.commit([next(writing)])
            elif kind == "piece" and writing is not None:
                steward.commit([next(writing)])
                writing = None if writing.done else writing
            elif kind not in ("begin", "piece"):
                entry = steward.append(kind, {"tenant": tenant, "uj": uj}).entry
                state, plain = apply(state, entry), apply(plain, entry)
    assert replay(store, apply, {}, key=key.public, workers=1) == plain   # a fold without compact passes them by
    folded = Folder(SPREAD)
    assert verify(store.read(), key.public, on_entry=folded, workers=1).valid and folded.state == state
    assert Steward.open(store, key, SPREAD, workers=1).state == state


def test_the_writer_spreads_a_checkpoint_so_later_appends_do_not_wait_for_it(tmp_path, steward_key, monkeypatch):
    """An append queued after a checkpoint began is durable before the
    checkpoint is, with chunks before and after it; one chunk is in flight at
    a time; start-up resumes from the checkpoint to the state a replay gives."""
    monkeypatch.setattr(steward_module, "CHUNK_BYTES", 64)
    steward = open_ledger(tmp_path / "l.db", steward_key)
    writer = GroupCommitWriter(steward)
    state = {"a": 5, "a/open": 1, "blob": bytes(1000)}   # 16 chunks
    batches, real_store = [], steward.store
    steward.store = lambda made: batches.append(sum(r.entry.kind == "checkpoint_chunk" for r in made)) \
        or real_store(made)
    order = []

    async def main():
        first = writer.submit("claim.admitted", {"tenant": "a", "uj": 5})
        written = writer.submit_checkpoint(state)
        assert writer.checkpointing
        with pytest.raises(RuntimeError):
            writer.submit_checkpoint(state)
        later = [writer.submit("claim.admitted", {"tenant": "b", "uj": n}) for n in range(3)]
        for future, name in ((first, "first"), (written, "checkpoint"), *((f, "later") for f in later)):
            future.add_done_callback(lambda _, name=name: order.append(name))
        await asyncio.gather(first, *later)
        assert "checkpoint" not in order, "the appends after it did not wait for the whole checkpoint"
        receipt = await written
        await writer.close()
        return receipt

    receipt = asyncio.run(main())
    assert not writer.checkpointing and order[-1] == "checkpoint"
    assert max(batches) == 1, "one chunk a batch"
    kinds = [receipts.read_core(cose.parse_whole(raw).payload)[0].kind for raw in steward.read()]
    chunk_seqs = [seq for seq, kind in enumerate(kinds) if kind == "checkpoint_chunk"]
    assert receipt.entry.body["first_chunk"] == chunk_seqs[0] == 2 and len(chunk_seqs) == 16
    assert chunk_seqs != list(range(2, 18)), "other receipts lie among the chunks"
    steward.close()
    fold = Fold(apply, {"blob": bytes(1000)}, restore=dict)
    resumed = open_ledger(tmp_path / "l.db", steward_key, fold)
    assert resumed.state == {**state, "b": 3, "b/open": 3}
    assert replay(resumed.read(), apply, {"blob": bytes(1000)}, workers=1) == resumed.state
    resumed.close()


def test_a_standby_follows_a_checkpoint_whose_chunks_span_its_reads(tmp_path, steward_key, monkeypatch):
    """A standby verifies the leader's tail a read at a time (Steward.follow);
    a spread checkpoint's chunks span several reads, and its run is carried
    from one to the next. It compacts where the leader took the checkpoint."""
    monkeypatch.setattr(steward_module, "CHUNK_BYTES", 8)
    from scheduler.ledger.sqlite import SqliteStore
    fold = Fold(apply, {}, restore=dict, compact=compact)
    leader = open_ledger(tmp_path / "l.db", steward_key)
    standby = Steward.open(SqliteStore(tmp_path / "l.db"), steward_key, fold)
    state = apply({}, leader.append("claim.admitted", {"tenant": "a", "uj": 5}).entry)
    state = apply(state, leader.append("claim.released", {"tenant": "a", "uj": 5}).entry)
    assert standby.follow() == 2
    state = compact(state)
    writing = leader.prepare_checkpoint(dict(state, pad="x" * 30), leader.length)
    for n, piece in enumerate(writing):
        leader.commit([piece])
        state = apply(state, leader.append("claim.admitted", {"tenant": "b", "uj": n}).entry)
        assert standby.follow() == 2
    assert standby.state == state and "a" not in state
    standby.close()
    leader.close()


def test_a_chunk_that_cannot_be_stored_fails_its_checkpoint(tmp_path, steward_key, monkeypatch):
    """The checkpoint's future carries the store's error, and no other chunk is written after it."""
    from scheduler.ledger.store import StoreError
    monkeypatch.setattr(steward_module, "CHUNK_BYTES", 64)
    steward = open_ledger(tmp_path / "l.db", steward_key)
    writer = GroupCommitWriter(steward)
    real_store, indexes = steward.store, []

    def store(made):
        indexes.extend(r.entry.body["index"] for r in made if r.entry.kind == "checkpoint_chunk")
        if any(r.entry.kind == "checkpoint_chunk" and r.entry.body["index"] == 2 for r in made):
            raise StoreError("disk full")
        real_store(made)
    steward.store = store

    async def main():
        written = writer.submit_checkpoint({"blob": bytes(1000)})
        with pytest.raises(StoreError, match="disk full"):
            await written
        assert not writer.checkpointing
        await writer.close()

    asyncio.run(main())
    assert indexes == [0, 1, 2], "nothing of the checkpoint after the chunk that failed"
    steward.close()
