"""EncodedClaims (service/encoded.py) against the plain encoding it stands in
for: across a state's changes (claims submitted, admitted, metered, settled,
compacted away, restored from a checkpoint as new objects), the checkpoint it
helps make is byte for byte checkpoint.snapshot's own; and dcbor.Raw splices
exactly the bytes encode would write."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scheduler import kernel
from scheduler.kernel import ClaimSpec, ConfigApplied, Device, Resources, Tenant, Worker, WorkerRegistered, checkpoint
from scheduler.ledger import dcbor
from scheduler.kernel.fast.pmap import PMap
import pytest

from scheduler.service import encoded as encoded_module
from scheduler.service.encoded import Encoded, EncodedClaims, EncodedMap, Sorted


@pytest.fixture(autouse=True, scope="module")
def small_blocks():
    """Blocks of 3 (split past 6): every test here crosses, splits and empties many."""
    kept, encoded_module.BLOCK = encoded_module.BLOCK, 3
    yield
    encoded_module.BLOCK = kept

WORKER = Worker("w1", cpu_millis=8000, memory_mb=1 << 20, disk_mb=1 << 20,
                devices=tuple(Device(f"w1-gpu{i}", "H200") for i in range(2)))
BASE = kernel.decide(kernel.ClusterState(), [ConfigApplied((Tenant("root", guarantee_uj=10**6, guarantee_mdev=4000),),
                                                           period_ns=100), WorkerRegistered(WORKER)], 0).state
OPS = st.lists(st.one_of(st.tuples(st.just("submit"), st.integers(1, 400_000), st.sampled_from([0, 500, 1000])),
                         st.tuples(st.just("release"), st.integers(0, 20)),
                         st.tuples(st.just("progress"), st.integers(0, 20), st.integers(0, 5)),
                         st.tuples(st.just("compact")), st.tuples(st.just("restore"))), max_size=25)


def step(state: kernel.ClusterState, n: int, op: tuple) -> kernel.ClusterState:
    if op[0] == "submit":
        event = kernel.submit(state, ClaimSpec(f"c{n}", "root", Resources(gpu_mdev=op[2]), estimate_uj=op[1]), n)
    elif op[0] == "release":
        event = kernel.release(state, f"c{op[1]}", n * 10)
    elif op[0] == "progress":
        event = kernel.progress(state, f"c{op[1]}", op[2])
    elif op[0] == "compact":
        return checkpoint.compacted(state)
    else:   # the claims become new objects, as after a start-up from a checkpoint
        return checkpoint.restore(dcbor.decode(dcbor.encode(checkpoint.snapshot(state), limit=None)))
    if event is None or isinstance(event, kernel.KernelError):   # (progress: None for the count it has)
        return state
    return kernel.decide(state, [event], n * 10).state


@given(OPS)
def test_a_checkpoint_with_kept_encodings_is_the_plain_ones_bytes(ops):
    encoded, state = EncodedClaims(), BASE
    for n, op in enumerate(ops):
        state = step(state, n, op)
        assert dcbor.encode(checkpoint.snapshot(state, encoded), limit=None) == \
            dcbor.encode(checkpoint.snapshot(state), limit=None)


@given(st.lists(st.integers(-(1 << 64), (1 << 64) - 1) | st.text(max_size=3)
                | st.dictionaries(st.text(max_size=2), st.integers(0, 1 << 40), max_size=3),
                max_size=30))
def test_raw_splices_what_encode_writes(items):
    spliced = {"b": dcbor.array([dcbor.encode(i) for i in items]), "a": [dcbor.Raw(dcbor.encode(i)) for i in items]}
    assert dcbor.encode(spliced) == dcbor.encode({"a": items, "b": items})


def test_an_array_head_at_every_length_boundary():
    for n in (0, 23, 24, 255, 256, 65_535, 65_536):
        assert dcbor.encode({"a": dcbor.array([dcbor.encode(0)] * n)}, limit=None) == \
            dcbor.encode({"a": [0] * n}, limit=None)


@given(st.dictionaries(st.text(max_size=4), st.integers(0, 1 << 40) | st.text(max_size=3), max_size=300),
       st.lists(st.lists(st.tuples(st.booleans(), st.text(max_size=4), st.integers(0, 1 << 40)), max_size=120),
                max_size=4))
def test_a_map_kept_encoded_is_the_plain_maps_bytes(start, rounds):
    """EncodedMap across rounds of changes (each put into its block: blocks
    split and emptied) encodes as `dict(sorted(...))` does, keys in det-CBOR's
    order."""
    encoded, entries = EncodedMap(), PMap(start)
    assert dcbor.encode(encoded(entries)) == dcbor.encode(dict(sorted(entries.items())))
    for changes in rounds:
        for put, key, value in changes:
            entries = entries.set(key, value) if put else entries.discard(key)
        assert dcbor.encode({"m": encoded(entries)}) == dcbor.encode({"m": dict(sorted(entries.items()))})


MAP_OPS = st.lists(st.one_of(st.tuples(st.just("put"), st.text(max_size=3), st.integers(0, 1 << 40)),
                             st.tuples(st.just("discard"), st.text(max_size=3)),
                             st.tuples(st.just("start")), st.tuples(st.just("step"), st.integers(0, 40)),
                             st.tuples(st.just("checkpoint"))), max_size=60)


@given(st.dictionaries(st.text(max_size=3), st.integers(0, 1 << 40), max_size=200), MAP_OPS)
def test_a_pass_in_steps_between_changes_and_checkpoints_keeps_the_plain_bytes(start, ops):
    """A pass (start, then steps of any size) toward a map that has changed
    again since, cut short by a checkpoint or left unfinished: every
    checkpoint encodes the latest map as `dict(sorted(...))` does, and a pass
    that ends holds exactly its map's items."""
    encoded, entries, toward = EncodedMap(), PMap(start), None
    plain = lambda m: [dcbor.encode([k, v])[1:] for k, v in sorted(m.items(), key=lambda kv: dcbor.key_order(kv[0]))]
    for op in ops:
        if op[0] == "put":
            entries = entries.set(op[1], op[2])
        elif op[0] == "discard":
            entries = entries.discard(op[1])
        elif op[0] == "start":
            encoded.entries.start(entries)
            toward = entries
        elif op[0] == "step":
            if encoded.entries.step(op[1]) and toward is not None:
                assert encoded.entries._sorted.items() == plain(toward)
                toward = None
        else:
            assert dcbor.encode({"m": encoded(entries)}) == dcbor.encode({"m": dict(sorted(entries.items()))})
            toward = None
    assert dcbor.encode({"m": encoded(entries)}) == dcbor.encode({"m": dict(sorted(entries.items()))})


@given(OPS, st.lists(st.integers(0, 3), min_size=25, max_size=25), st.integers(1, 3))
def test_claims_kept_by_passes_between_changes_give_the_plain_checkpoint(ops, steps, chunk):
    """Encoded.follow's passes (as the engine's keep_encoded runs them between
    calls) interleaved with the state's changes: every checkpoint is
    checkpoint.snapshot's own bytes."""
    encoded, state, passing = Encoded(), BASE, iter(())
    for n, (op, k) in enumerate(zip(ops, steps)):
        state = step(state, n, op)
        if k == 0:
            passing = encoded.follow(state.claims, {}, chunk)
        for _ in range(k):
            next(passing, None)
        if n % 3 == 2:
            assert dcbor.encode(checkpoint.snapshot(state, encoded.claims), limit=None) == \
                dcbor.encode(checkpoint.snapshot(state), limit=None)
    assert dcbor.encode(checkpoint.snapshot(state, encoded.claims), limit=None) == \
        dcbor.encode(checkpoint.snapshot(state), limit=None)


@given(st.lists(st.integers(0, 60), max_size=40), st.lists(st.tuples(st.booleans(), st.integers(0, 60)), max_size=120))
def test_sorted_blocks_are_a_sorted_list(start, ops):
    """Sorted (blocks, each joined once) against a dict sorted every time:
    the same items in the same order, joined to the same bytes."""
    model = {p: b"s%d" % p for p in sorted(set(start))}
    kept = Sorted(list(model), list(model.values()))
    for n, (put, place) in enumerate(ops):
        if put:
            kept.put(place, b"%d-%d" % (place, n), place not in model)
            model[place] = b"%d-%d" % (place, n)
        elif place in model:
            kept.remove(place)
            del model[place]
        assert kept.items() == [model[p] for p in sorted(model)] and kept.count == len(model)
        assert b"".join(kept.parts()) == b"".join(model[p] for p in sorted(model))
