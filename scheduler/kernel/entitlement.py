"""The quota algebra of RULES §3 over the maintained roll-ups, per dimension
(µJ or milli-devices). Borrow and lend limits exist for µJ only.

Own pass: along the path tenant → root, every node's within-guarantee usage
plus the request stays within its guarantee.

Allowance: how far a node may go above its guarantee, computed root-down. The
root's is 0 (its guarantee is the cluster total). A node's *pool* is its
guarantee plus its own allowance, less its direct usage, less each child's
usage up to that child's guarantee, less what children hold back by lend
limits; a child's allowance is its weighted share of its parent's pool among
the children that borrow (largest remainder, ties to the smaller name), capped
by its borrow limit. A claim fits when every node on its path stays within
guarantee + allowance; a borrowing claim also counts the held-back guarantee.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

from .snapshot import NodeUsage
from .tree import TenantTree, _held

UJ, MDEV = "uj", "mdev"


class Fit(NamedTuple):
    """One check's verdict and figures (a NamedTuple: several per decision)."""

    ok: bool
    node: str
    guarantee: int
    usage: int
    allowance: int = 0
    limit: int | None = None


# a Fit from all six fields, without NamedTuple's Python-level __new__ (several per decision)
_fit = partial(tuple.__new__, Fit)

class Dim(NamedTuple):
    """Where one dimension's figures are: its row of `tree.guarantees`, and
    the NodeUsage fields of its direct, total and within-guarantee usage, by
    position (a tuple index is what the loops below read, per node)."""

    guarantees: int
    direct: int
    total: int
    inner: int


def _dim(row: int, suffix: str) -> Dim:
    field = NodeUsage._fields.index
    return Dim(row, field(f"direct_{suffix}"), field(f"total_{suffix}"), field(f"inner_{suffix}"))


_DIMS = {UJ: _dim(0, "uj"), MDEV: _dim(1, "mdev")}


def within_guarantees(tree: TenantTree, usage, tenant: str, uj: int, mdev: int) -> bool:
    """The common case, cheaply: every node on the path stays within its own
    guarantee in both dimensions even counting everything its subtree uses.
    Then the own pass holds and nothing borrows, so no allowance is needed."""
    values, (g_uj, g_mdev) = usage.values, tree.guarantees
    for at in tree.at_path[tenant]:
        u = values[at]
        if u.total_uj + uj > g_uj[at] or u.total_mdev + mdev > g_mdev[at]:
            return False
    return True


def own_pass(tree: TenantTree, usage, tenant: str, dim: str, amount: int) -> Fit:
    """The first node on the path whose within-guarantee usage cannot take
    `amount`; ok with the tenant's figures when none."""
    d = _DIMS[dim]
    values, g, inner = usage.values, tree.guarantees[d.guarantees], d.inner
    for at in tree.at_path[tenant]:
        used = values[at][inner]
        if used + amount > g[at]:
            return _fit((False, tree.order[at], g[at], used, 0, None))
    at = tree.index[tenant]
    return _fit((True, tenant, g[at], values[at][inner], 0, None))


def _locked_at(tree: TenantTree, values, at: int) -> int:
    return _held(tree.guarantees[0][at], tree.lend_limits[at], values[at].total_uj)


def _pool_and_share(tree: TenantTree, values, parent: int, child: int, dim: str, amount: int, pool: int) -> int:
    """`child`'s share of what `parent` can lend: `pool` less each child's
    usage up to its guarantee (the claim's `amount` counted at `child`),
    split by weight among the children above their guarantee, largest
    remainder first, ties to the smaller name (RULES §3; as protos.energy
    `split`, without building every share). One pass over the children."""
    d = _DIMS[dim]
    g, total, weights = tree.guarantees[d.guarantees], d.total, tree.weights
    borrowers = []
    for k in tree.kids[parent]:
        used = values[k][total] + (amount if k == child else 0)
        if used > g[k]:
            pool -= g[k]
            borrowers.append(k)
        else:
            pool -= used
    if child not in borrowers or pool <= 0:
        return 0
    if len(borrowers) == 1:
        return pool
    weight_sum = sum(weights[k] for k in borrowers)
    mine = pool * weights[child]
    my_rest = mine % weight_sum
    floors = ahead = 0  # Σ floor shares; borrowers ranked before the child for the leftover units
    for k in borrowers:
        share = pool * weights[k]
        floors += share // weight_sum
        rest = share % weight_sum
        ahead += rest > my_rest or (rest == my_rest and k < child)
    return mine // weight_sum + (ahead < pool - floors)


def total_fit(tree: TenantTree, usage, tenant: str, dim: str, amount: int, borrowing: bool) -> Fit:
    """Whether adding `amount` at `tenant` keeps every node on the path within
    guarantee + allowance; the first (topmost) node that would not, else ok."""
    path = tree.at_path[tenant]
    d = _DIMS[dim]
    values, g, direct, total = usage.values, tree.guarantees[d.guarantees], d.direct, d.total
    energy = dim == UJ
    allowance = 0
    for depth in range(len(path) - 1, -1, -1):
        at = path[depth]
        child = path[depth - 1] if depth else None
        # guarantee the children hold back by lend limits, except the
        # claimant's own branch (its own guarantee is its to use)
        held = 0
        if energy:
            held = values[at].locked_uj - (_locked_at(tree, values, child) if child is not None else 0)
        limit = tree.borrow_limits[at] if energy and depth < len(path) - 1 else None
        used = values[at][total]
        if used + amount + (held if borrowing else 0) - g[at] > allowance:
            return _fit((False, tree.order[at], g[at], used, allowance, limit))
        if child is None:
            return _fit((True, tree.order[at], g[at], used, allowance, limit))
        child_held = values[child].locked_uj if energy and borrowing else 0
        if values[child][total] + amount + child_held <= g[child]:
            allowance = 0  # the child does not go above its guarantee: no share needed
            continue
        pool = g[at] + allowance - values[at][direct] - held
        allowance = _pool_and_share(tree, values, at, child, dim, amount, pool)
        child_limit = tree.borrow_limits[child] if energy else None
        if child_limit is not None:
            allowance = min(allowance, child_limit)
    raise AssertionError("a path ends at the root")
