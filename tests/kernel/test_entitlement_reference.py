"""The entitlement hot paths (positions, one pass over the children, the
largest-remainder share computed for one child) against the plain
definition in tests/kernel/reference.py: map lookups per node and
protos.energy `split` over every borrowing child. Random trees, random
usage, every tenant and dimension."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from strategies import trees

import reference  # tests/kernel/reference.py
from scheduler.kernel.entitlement import DEVICES, ENERGY, own_pass, within_allowance, within_guarantees
from scheduler.kernel.rollup import rollup
from scheduler.kernel.tree import load_tree


@given(trees(), st.lists(st.tuples(st.sampled_from(["root", "a", "b", "c", "a1"]), st.integers(0, 300),
                                   st.integers(0, 5000)), max_size=6),
       st.integers(0, 300), st.integers(0, 5000))
def test_fits_equal_the_plain_definition(tenants, direct, uj, mdev):
    tree = load_tree(tenants)
    given_direct = {name: (d_uj, d_mdev) for name, d_uj, d_mdev in direct if name in tree.nodes}
    usage = rollup(tree, given_direct)
    plain = {dim: reference.rolled_up(tree, {n: given_direct.get(n, (0, 0))[i] for n in tree.order},
                                      dim) for i, dim in enumerate((ENERGY, DEVICES))}
    for tenant in tree.order:
        within = all((usage[n].energy.total + uj <= tree.nodes[n].guarantee_uj
                      and usage[n].devices.total + mdev <= tree.nodes[n].guarantee_mdev) for n in tree.path(tenant))
        assert within_guarantees(tree, usage, tenant, uj, mdev) == within
        for dim, amount in ((ENERGY, uj), (DEVICES, mdev)):
            assert own_pass(tree, usage, tenant, dim, amount) == reference.own_pass(
                tree, plain[dim], tenant, dim, amount)
            for borrowing in (False, True):
                assert within_allowance(tree, usage, tenant, dim, amount, borrowing) == reference.within_allowance(
                    tree, plain[dim], tenant, dim, amount, borrowing)
