"""Edit sessions (scheduler/kernel/fast/edit.py): changes made in place under an
Edit give the same contents as the persistent operations, and never touch a
structure the edit did not make: the map or sequence a batch starts from, and
anything shared with it, reads the same afterwards."""

from __future__ import annotations

import contextlib
from itertools import groupby
from operator import itemgetter

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.kernel.fast.edit import Edit
from scheduler.kernel.fast.freeindex import FreeIndex, _ceiling
from scheduler.kernel.fast.pmap import MISSING, PMap, changes
from scheduler.kernel.fast.sortedseq import SortedSeq

map_ops = st.lists(st.tuples(st.booleans(), st.integers(0, 600), st.integers()), max_size=300)


@settings(max_examples=40)
@given(st.one_of(st.dictionaries(st.integers(0, 600), st.integers(), max_size=30),
                 # big enough for many leaves, some shared with the start when written
                 st.dictionaries(st.integers(0, 600), st.integers(), min_size=100, max_size=400)), map_ops)
def test_a_map_edited_in_place_equals_the_persistent_one(start, ops):
    base = PMap(start)
    persistent, edited, edit, model = base, base, Edit(), dict(start)
    first_batch = None
    for n, (put, key, value) in enumerate(ops):
        if n == len(ops) // 2:  # a second batch, from what the first left
            first_batch, edit = (edited, dict(model)), Edit()
        if put:
            with edit:
                edited = edited.set(key, value)
            persistent = persistent.set(key, value)
            model[key] = value
        elif key in model:
            with edit:
                edited = edited.delete(key)
            persistent = persistent.delete(key)
            del model[key]
    assert dict(edited.items()) == dict(persistent.items()) == model
    assert len(edited) == len(model)
    assert dict(base.items()) == start and len(base) == len(start)
    if first_batch is not None:
        assert dict(first_batch[0].items()) == first_batch[1]


keys = st.tuples(st.integers(0, 8), st.integers(0, 50), st.integers(0, 50), st.integers(0, 50),
                 st.integers(0, 400).map(lambda n: f"w{n:03}"))


@settings(max_examples=40)
@given(st.one_of(st.lists(keys, max_size=60, unique_by=lambda k: k[4]),
                 st.lists(keys, min_size=200, max_size=400, unique_by=lambda k: k[4])),  # several blocks
       st.lists(st.tuples(st.integers(0, 10 ** 6), keys), max_size=300), st.booleans())
def test_a_sequence_edited_in_place_equals_a_sorted_list(start, changes, free_index):
    kind = FreeIndex if free_index else SortedSeq
    base = kind(start)
    seq, edit, model = base, Edit(), sorted(start)
    first_batch = None
    for n, (pick, new) in enumerate(changes):
        if n == len(changes) // 2:  # a second batch, from what the first left
            first_batch, edit = (seq, list(model)), Edit()
        old = model[pick % len(model)] if model and pick % 3 else None
        if new in model or any(k[4] == new[4] for k in model if k != old):
            new = None
        if old is None and new is None:
            continue
        with edit:
            seq = seq.replace(old, new)
        model = sorted([k for k in model if k != old] + ([new] if new is not None else []))
    assert list(seq) == model and len(seq) == len(model)
    assert list(seq._maxes) == [block[-1] for block in seq._blocks] and all(seq._blocks)
    assert all(len(block) <= 128 for block in seq._blocks)
    if free_index:
        assert list(seq._ceilings) == [_ceiling(block) for block in seq._blocks]
    assert list(base) == sorted(start)
    if first_batch is not None:
        assert list(first_batch[0]) == first_batch[1]
    # and the persistent operations still work on what the batch left
    if model:
        assert list(seq.remove(model[0])) == model[1:]


@settings(max_examples=80)
@given(st.lists(st.integers(1, 300), max_size=12), st.lists(st.integers(0, 10 ** 6), max_size=200))
def test_the_first_key_of_each_run_is_the_groupby_of_every_key(runs, removals):
    """SortedSeq.firsts without bounds (one bisect per run of a part, one
    step per mixed block) against the plain walk of every key, on sequences
    of one block to many, with runs longer than a block (a shape with
    thousands of pending claims) beside runs of one, and after removals."""
    seq = SortedSeq((part, j) for part, length in enumerate(runs) for j in range(length))
    for pick in removals:
        if len(seq):
            seq = seq.remove(list(seq)[pick % len(seq)])
    first = itemgetter(0)
    assert seq.firsts(first, lambda part: (part, float("inf"))) == [next(run) for _, run in groupby(seq, first)]


@settings(max_examples=80)
@given(st.lists(st.integers(1, 300), max_size=12), st.integers(-1, 13), st.integers(-1, 13), st.integers(0, 300))
def test_the_first_key_of_each_run_between_two_bounds_is_the_plain_walks(runs, start_part, stop_part, at):
    """SortedSeq.firsts (what shapes.sized and of_tenant read ranges with)
    against a walk of every key: bounds inside a run, on a run's edge, past
    either end, or none."""
    seq = SortedSeq((part, j) for part, length in enumerate(runs) for j in range(length))
    start = None if start_part < 0 else (start_part, at)
    stop = None if stop_part < 0 else (stop_part, at)
    first = itemgetter(0)
    inside = [k for k in seq if (start is None or k >= start) and (stop is None or k < stop)]
    plain = [next(run) for _, run in groupby(inside, first)]
    assert seq.firsts(first, lambda part: (part, float("inf")), start, stop) == plain


@settings(max_examples=40)
@given(st.dictionaries(st.integers(0, 3000), st.integers(0, 3), max_size=400), map_ops, st.booleans())
def test_changes_between_two_maps_are_every_key_compared(start, ops, batched):
    """fast/pmap.changes, which walks only the nodes two maps do not share,
    against comparing every key: across set and delete (splitting leaves,
    emptying branches), copied or in an edit batch."""
    base = PMap(start)
    new, model = base, dict(start)
    with (Edit() if batched else contextlib.nullcontext()):
        for put, key, value in ops:
            if put:
                new, model[key] = new.set(key, value), value
            elif key in model:
                new = new.delete(key)
                del model[key]
    plain = sorted((k, start.get(k, MISSING), model.get(k, MISSING)) for k in start.keys() | model.keys()
                   if start.get(k, MISSING) != model.get(k, MISSING))
    found = sorted((k, a, b) for k, a, b in changes(base, new) if a != b)   # same-valued sets may be reported
    assert found == plain
    assert all(k in start or k in model for k, _, _ in changes(base, new))
    assert changes(new, new) == [] and changes(base, base) == []
    # from and to an empty map: walked a leaf at a time (walk_changes), never flattened whole
    assert sorted(changes(PMap(), base)) == sorted((k, MISSING, v) for k, v in start.items())
    assert sorted(changes(base, PMap())) == sorted((k, v, MISSING) for k, v in start.items())
