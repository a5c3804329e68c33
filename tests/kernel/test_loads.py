"""A worker's load (scheduler/kernel/loads.py): `adjust`, one claim at a time,
adds up to `load_of` from scratch, and its open claim ids (fast/held.py: a
tuple while few, a sortedseq.Shared beyond) equal a sorted tuple, are held the
same way whichever way they were made, and are never changed in place, even
under an edit batch (the service keeps them with each occupancy version and
caches by identity)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.kernel.fast.edit import Edit
from scheduler.kernel.fast.sortedseq import Shared
from scheduler.kernel.fast.held import SMALL, with_id, without_id
from scheduler.kernel.loads import WorkerLoad, adjust, load_of
from scheduler.kernel.reasons import Placement
from scheduler.kernel.snapshot import Claim, ClaimSpec, Device, DeviceShare, Resources, Worker


@settings(max_examples=40)
@given(st.one_of(st.lists(st.integers(0, 300), max_size=40),
                 st.lists(st.integers(0, 3000), min_size=200, max_size=500)),  # several blocks
       st.lists(st.tuples(st.booleans(), st.integers(0, 3000)), max_size=300))
def test_open_claim_ids_equal_a_sorted_tuple_and_never_change_in_place(start, changes):
    active, model = (), []
    for key in sorted(set(start)):
        active, model = with_id(active, key), model + [key]
    seen = []   # every sequence handed out, with what it held then
    with Edit():   # as inside a kernel batch: a Shared sequence still copies
        for add, key in changes:
            if add and key not in model:
                active, model = with_id(active, key), sorted(model + [key])
            elif not add and key in model:
                active, model = without_id(active, key), [k for k in model if k != key]
            else:
                continue
            assert tuple(active) == tuple(model) and len(active) == len(model)
            assert type(active) is (tuple if len(model) <= SMALL else Shared)
            seen.append((active, list(model)))
    assert all(list(s) == kept for s, kept in seen)


workers = st.builds(lambda n, cpu: Worker("w", cpu, 64, 64, tuple(Device(f"g{i}", "H200") for i in range(n))),
                    st.integers(0, 4), st.integers(0, 64))


@st.composite
def claims(draw, worker: Worker) -> list[Claim]:
    out = []
    for i in range(draw(st.sampled_from((0, 3, 30, SMALL, SMALL + 1, 150)))):
        names = [d.device_id for d in worker.devices] + ["gone"]   # a device the worker no longer has
        shares = tuple(DeviceShare(d, draw(st.sampled_from((250, 500, 1000))))
                       for d in draw(st.lists(st.sampled_from(names), max_size=2, unique=True)))
        spec = ClaimSpec(f"c{i:03}", "t", Resources(draw(st.integers(0, 8)), draw(st.integers(0, 8)),
                                                   draw(st.integers(0, 8))),
                         draw(st.sampled_from((Placement.PLACEMENT_SHARED, Placement.PLACEMENT_EXCLUSIVE))))
        out.append(Claim(spec, i, devices=shares))
    return out


@settings(max_examples=60)
@given(st.data(), workers)
def test_adjust_one_claim_at_a_time_adds_up_to_the_load_from_scratch(data, worker):
    open_claims = data.draw(claims(worker))
    released = data.draw(st.sets(st.sampled_from([c.claim_id for c in open_claims]))) if open_claims else set()
    load = WorkerLoad(device_used=(0,) * len(worker.devices))
    with Edit():
        for claim in open_claims:
            load = adjust(worker, load, claim.claim_id, claim.spec, claim.devices, 1)
        for claim in open_claims:
            if claim.claim_id in released:
                load = adjust(worker, load, claim.claim_id, claim.spec, claim.devices, -1)
    kept = [c for c in open_claims if c.claim_id not in released]
    assert load == load_of(worker, kept)
    assert list(load.active) == sorted(c.claim_id for c in kept)
    assert load_of(worker, []).active == ()


@settings(max_examples=40)
@given(st.lists(st.integers(0, 5000), min_size=SMALL + 1, max_size=600, unique=True),
       st.lists(st.tuples(st.booleans(), st.integers(0, 5000)), max_size=100))
def test_the_difference_of_two_shared_sequences_is_their_set_differences(start, changes):
    """Shared.difference, which reads only the blocks two sequences do not
    share, against the plain set differences."""
    old = Shared(start)
    new, model = old, set(start)
    for add, key in changes:
        if add and key not in model:
            new, model = new.add(key), model | {key}
        elif not add and key in model:
            new, model = new.remove(key), model - {key}
    assert old.difference(new) == (set(start) - model, model - set(start))
    assert new.difference(new) == (set(), set())
