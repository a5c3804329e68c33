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

from dataclasses import dataclass

from protos.energy import Grade, split

from .snapshot import NodeUsage
from .tree import TenantTree, _locked

UJ, MDEV = "uj", "mdev"


@dataclass(frozen=True, slots=True)
class Fit:
    ok: bool
    node: str
    guarantee: int
    usage: int
    allowance: int = 0
    limit: int | None = None


def _g(tree: TenantTree, name: str, dim: str) -> int:
    node = tree.nodes[name]
    return node.guarantee_uj if dim == UJ else node.guarantee_mdev


def _total(u: NodeUsage, dim: str) -> int:
    return u.total_uj if dim == UJ else u.total_mdev


def within_guarantees(tree: TenantTree, usage, tenant: str, uj: int, mdev: int) -> bool:
    """The common case, cheaply: every node on the path stays within its own
    guarantee in both dimensions even counting everything its subtree uses.
    Then the own pass holds and nothing borrows, so no allowance is needed."""
    nodes = tree.nodes
    for name in tree.path(tenant):
        u, t = usage[name], nodes[name]
        if u.total_uj + uj > t.guarantee_uj or u.total_mdev + mdev > t.guarantee_mdev:
            return False
    return True


def own_pass(tree: TenantTree, usage, tenant: str, dim: str, amount: int, known_ok: bool = False) -> Fit:
    """The first node on the path whose within-guarantee usage cannot take
    `amount`; ok with the tenant's figures when none (or when the caller
    already knows it fits)."""
    for name in () if known_ok else tree.path(tenant):
        u = usage[name]
        inner = u.inner_uj if dim == UJ else u.inner_mdev
        g = _g(tree, name, dim)
        if inner + amount > g:
            return Fit(False, name, g, inner)
    u = usage[tenant]
    return Fit(True, tenant, _g(tree, tenant, dim), u.inner_uj if dim == UJ else u.inner_mdev)


def _child_share(tree: TenantTree, usage, parent: str, child: str, dim: str, amount: int, pool: int) -> int:
    """`child`'s weighted share of `pool` among the borrowing children."""
    weights = {}
    for k in tree.children[parent]:
        total = _total(usage[k], dim) + (amount if k == child else 0)
        if total > _g(tree, k, dim):
            weights[k] = tree.nodes[k].weight
    if child not in weights or pool <= 0:
        return 0
    for share in split(pool, weights, Grade.ModelBased):
        if share.occupant == child:
            return share.uj
    raise AssertionError("split lost an occupant")


def _held_back(tree: TenantTree, usage, name: str, path_child: str | None, dim: str) -> int:
    """Guarantee `name`'s children hold back by lend limits, except the
    claimant's own branch (its own guarantee is its to use)."""
    if dim != UJ:
        return 0
    held = usage[name].locked_uj
    if path_child is not None:
        held -= _locked(tree.nodes[path_child], usage[path_child].total_uj)
    return held


def total_fit(tree: TenantTree, usage, tenant: str, dim: str, amount: int, borrowing: bool) -> Fit:
    """Whether adding `amount` at `tenant` keeps every node on the path within
    guarantee + allowance; the first (topmost) node that would not, else ok."""
    path = tree.path(tenant)
    allowance = 0
    fit = None
    for depth in range(len(path) - 1, -1, -1):
        name = path[depth]
        child = path[depth - 1] if depth else None
        u, g = usage[name], _g(tree, name, dim)
        held = _held_back(tree, usage, name, child, dim) if borrowing else 0
        limit = tree.nodes[name].borrow_limit_uj if dim == UJ and depth < len(path) - 1 else None
        fit = Fit(True, name, g, _total(u, dim), allowance, limit)
        if _total(u, dim) + amount + held - g > allowance:
            return Fit(False, name, g, _total(u, dim), allowance, limit)
        if child is None:
            break
        child_held = _held_back(tree, usage, child, None, dim) if borrowing else 0
        if _total(usage[child], dim) + amount + child_held <= _g(tree, child, dim):
            allowance = 0  # the child does not go above its guarantee: no share needed
            continue
        direct = u.direct_uj if dim == UJ else u.direct_mdev
        within = sum(min(_total(usage[k], dim) + (amount if k == child else 0), _g(tree, k, dim))
                     for k in tree.children[name])
        pool = g + allowance - direct - within - _held_back(tree, usage, name, child, dim)
        allowance = _child_share(tree, usage, name, child, dim, amount, pool)
        child_limit = tree.nodes[child].borrow_limit_uj if dim == UJ else None
        if child_limit is not None:
            allowance = min(allowance, child_limit)
    assert fit is not None
    return fit
