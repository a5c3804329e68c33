"""The roll-up (scheduler/kernel/rollup.py): `bump`, one change along one
path, gives what `rollup` recomputes from every node's direct usage, outside
an edit batch and inside one (where it changes the records the batch made in
place), and never changes a roll-up made before the batch: neither the one
it started from nor what an earlier batch left. The quota algebra's figures
are then the plain definition's (test_entitlement_reference.py)."""

from __future__ import annotations

from contextlib import nullcontext

from hypothesis import given
from hypothesis import strategies as st
from strategies import trees

import reference  # tests/kernel/reference.py
from scheduler.kernel.fast.edit import Edit
from scheduler.kernel.rollup import bump, rollup
from scheduler.kernel.snapshot import Usage
from scheduler.kernel.tree import DEVICES, ENERGY, load_tree

changes = st.lists(st.tuples(st.sampled_from(["root", "a", "b", "c", "a1"]), st.integers(-300, 300),
                             st.integers(-5000, 5000)), max_size=12)


def _figures(u) -> tuple[int, int, int, int]:
    return u.direct, u.total, u.within, u.held_back


@given(trees(), changes, changes, st.booleans())
def test_bumps_equal_a_full_rollup(tenants, first, second, in_batches):
    tree = load_tree(tenants)
    start = rollup(tree, {})
    usage, direct = start, {}
    done = []  # (roll-up, direct usage) after each batch
    for steps in (first, second):
        edit = Edit()
        for name, d_uj, d_mdev in steps:
            if name not in tree.nodes:
                continue
            with edit if in_batches else nullcontext():
                usage = bump(tree, usage, name, d_uj, d_mdev)
            uj, mdev = direct.get(name, (0, 0))
            direct[name] = (uj + d_uj, mdev + d_mdev)
        done.append((usage, dict(direct)))
    for made, then in done:  # the first batch's result is untouched by the second
        assert made == rollup(tree, then)
    plain = {dim: reference.rolled_up(tree, {n: direct.get(n, (0, 0))[i] for n in tree.order}, dim)
             for i, dim in enumerate((ENERGY, DEVICES))}
    for name in tree.order:
        for dim in (ENERGY, DEVICES):
            assert _figures(getattr(usage[name], dim)) == _figures(plain[dim][name])
    assert start == rollup(tree, {})  # what the changes started from reads the same


def test_usage_records_compare_by_their_figures():
    assert Usage(1, 2, 3, 4) == Usage(direct=1, total=2, within=3, held_back=4)
    assert Usage(1, 2, 3, 4) != Usage(1, 2, 3, 5) and Usage() != (0, 0, 0, 0)
    assert repr(Usage(1, 2, 3, 4)) == "Usage(direct=1, total=2, within=3, held_back=4)"
