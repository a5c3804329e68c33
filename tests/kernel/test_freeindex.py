"""The persistent sorted sequence and the free index against a plain sorted
list: enough keys for several blocks, random adds, removals and replaces
(the one-block replace included), and every block ceiling exact."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.kernel.fast.freeindex import FreeIndex, _ceiling

keys = st.tuples(st.integers(0, 8), st.integers(0, 50), st.integers(0, 50), st.integers(0, 50),
                 st.integers(0, 400).map(lambda n: f"w{n:03}"))


@settings(max_examples=25)
@given(st.lists(keys, min_size=150, max_size=400, unique_by=lambda k: k[4]),
       st.lists(st.tuples(st.integers(0, 10 ** 6), keys), max_size=120))
def test_free_index_equals_a_sorted_list(start, changes):
    index, model = FreeIndex(start), sorted(start)
    for pick, new in changes:
        old = model[pick % len(model)] if model and pick % 3 else None
        if new in model or any(k[4] == new[4] for k in model if k != old):
            new = None
        if old is None and new is None:
            continue
        index = index.replace(old, new)
        model = sorted([k for k in model if k != old] + ([new] if new is not None else []))
        assert list(index) == model and len(index) == len(model)
        assert index._maxes == tuple(block[-1] for block in index._blocks)
        assert index._ceilings == tuple(_ceiling(block) for block in index._blocks)
        assert all(index._blocks)


@settings(max_examples=25)
@given(st.lists(keys, min_size=150, max_size=400, unique_by=lambda k: k[4]),
       st.integers(0, 9), st.integers(0, 51), st.integers(0, 51), st.integers(0, 51))
def test_covering_is_the_sorted_list_filtered(start, mdev, cpu, memory, disk):
    """covering lists exactly the keys at or after (mdev, cpu) whose cpu,
    memory and disk cover the request, in order."""
    expected = [k[4] for k in sorted(start) if k[:2] >= (mdev, cpu) and k[1] >= cpu and k[2] >= memory
                and k[3] >= disk]
    assert list(FreeIndex(start).covering(mdev, cpu, memory, disk)) == expected
