"""The entitlement hot paths (positions, one pass over the children, the
largest-remainder share computed for one child) against the straightforward
definition: map lookups per node and protos.energy `split` over every
borrowing child. Random trees, random usage, every tenant and dimension."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from strategies import trees

from protos.energy import Grade, split
from scheduler.kernel.entitlement import MDEV, UJ, Fit, own_pass, total_fit, within_guarantees
from scheduler.kernel.tree import _locked, load_tree, rollup


def _g(tree, name, dim):
    return tree.nodes[name].guarantee_uj if dim == UJ else tree.nodes[name].guarantee_mdev


def _total(usage, name, dim):
    return usage[name].total_uj if dim == UJ else usage[name].total_mdev


def _share(tree, usage, parent, child, dim, amount, pool):
    weights = {k: tree.nodes[k].weight for k in tree.children[parent]
               if _total(usage, k, dim) + (amount if k == child else 0) > _g(tree, k, dim)}
    if child not in weights or pool <= 0:
        return 0
    return next(s.uj for s in split(pool, weights, Grade.ModelBased) if s.occupant == child)


def _held(tree, usage, name, child, dim):
    if dim != UJ:
        return 0
    held = usage[name].locked_uj
    return held - (_locked(tree.nodes[child], usage[child].total_uj) if child is not None else 0)


def reference_total_fit(tree, usage, tenant, dim, amount, borrowing):
    path, allowance, fit = tree.path(tenant), 0, None
    for depth in range(len(path) - 1, -1, -1):
        name, child = path[depth], (path[depth - 1] if depth else None)
        g, used = _g(tree, name, dim), _total(usage, name, dim)
        held = _held(tree, usage, name, child, dim) if borrowing else 0
        limit = tree.nodes[name].borrow_limit_uj if dim == UJ and depth < len(path) - 1 else None
        fit = Fit(True, name, g, used, allowance, limit)
        if used + amount + held - g > allowance:
            return Fit(False, name, g, used, allowance, limit)
        if child is None:
            break
        child_held = _held(tree, usage, child, None, dim) if borrowing else 0
        if _total(usage, child, dim) + amount + child_held <= _g(tree, child, dim):
            allowance = 0
            continue
        direct = usage[name].direct_uj if dim == UJ else usage[name].direct_mdev
        within = sum(min(_total(usage, k, dim) + (amount if k == child else 0), _g(tree, k, dim))
                     for k in tree.children[name])
        pool = g + allowance - direct - within - _held(tree, usage, name, child, dim)
        allowance = _share(tree, usage, name, child, dim, amount, pool)
        if dim == UJ and tree.nodes[child].borrow_limit_uj is not None:
            allowance = min(allowance, tree.nodes[child].borrow_limit_uj)
    return fit


def reference_own_pass(tree, usage, tenant, dim, amount):
    for name in tree.path(tenant):
        inner = usage[name].inner_uj if dim == UJ else usage[name].inner_mdev
        if inner + amount > _g(tree, name, dim):
            return Fit(False, name, _g(tree, name, dim), inner)
    inner = usage[tenant].inner_uj if dim == UJ else usage[tenant].inner_mdev
    return Fit(True, tenant, _g(tree, tenant, dim), inner)


@given(trees(), st.lists(st.tuples(st.sampled_from(["root", "a", "b", "c", "a1"]), st.integers(0, 300),
                                   st.integers(0, 5000)), max_size=6),
       st.integers(0, 300), st.integers(0, 5000))
def test_fits_equal_the_straightforward_definition(tenants, direct, uj, mdev):
    tree = load_tree(tenants)
    usage = rollup(tree, {name: (d_uj, d_mdev) for name, d_uj, d_mdev in direct if name in tree.nodes})
    for tenant in tree.order:
        within = all((usage[n].total_uj + uj <= tree.nodes[n].guarantee_uj
                      and usage[n].total_mdev + mdev <= tree.nodes[n].guarantee_mdev) for n in tree.path(tenant))
        assert within_guarantees(tree, usage, tenant, uj, mdev) == within
        for dim, amount in ((UJ, uj), (MDEV, mdev)):
            assert own_pass(tree, usage, tenant, dim, amount) == reference_own_pass(tree, usage, tenant, dim, amount)
            for borrowing in (False, True):
                assert total_fit(tree, usage, tenant, dim, amount, borrowing) == \
                    reference_total_fit(tree, usage, tenant, dim, amount, borrowing)
