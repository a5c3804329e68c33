"""The roll-up (scheduler/kernel/rollup.py): `bump`, one change along one
path, gives what `rollup` recomputes from every node's direct usage, outside
an edit batch and inside one, and never changes a roll-up it did not make.
The quota algebra's figures are then the plain definition's
(test_entitlement_reference.py)."""

from __future__ import annotations

from contextlib import nullcontext

from hypothesis import given
from hypothesis import strategies as st
from strategies import trees

from scheduler.kernel import reference
from scheduler.kernel.edit import Edit
from scheduler.kernel.rollup import bump, rollup
from scheduler.kernel.tree import DEVICES, ENERGY, load_tree

changes = st.lists(st.tuples(st.sampled_from(["root", "a", "b", "c", "a1"]), st.integers(-300, 300),
                             st.integers(-5000, 5000)), max_size=12)


def _plain(tree, direct):
    """Each dimension's usage of every node, as the reference sums it."""
    return {dim: reference.rolled_up(tree, {n: direct.get(n, (0, 0))[i] for n in tree.order}, dim)
            for i, dim in enumerate((ENERGY, DEVICES))}


@given(trees(), changes, st.booleans())
def test_bumps_equal_a_full_rollup(tenants, steps, in_a_batch):
    tree = load_tree(tenants)
    start = rollup(tree, {})
    usage, direct, edit = start, {}, Edit()
    for name, d_uj, d_mdev in steps:
        if name not in tree.nodes:
            continue
        with edit if in_a_batch else nullcontext():
            usage = bump(tree, usage, name, d_uj, d_mdev)
        uj, mdev = direct.get(name, (0, 0))
        direct[name] = (uj + d_uj, mdev + d_mdev)
    assert usage == rollup(tree, direct)
    plain = _plain(tree, direct)
    for name in tree.order:
        for dim in (ENERGY, DEVICES):
            assert tuple(getattr(usage[name], dim)) == tuple(plain[dim][name])
    assert start == rollup(tree, {})  # what the changes started from reads the same
