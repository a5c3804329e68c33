"""The quota algebra of RULES §3 over the maintained roll-up, per dimension:
ENERGY (µJ) or DEVICES (milli-devices). A dimension's guarantees and limits
are the tree's `Quota` of that name (`tree.energy`, `tree.devices`), each
node's usage the roll-up's list of that name (`usage.energy`,
`usage.devices`), both by tree position along `tree.at_path`. Borrow and
lend limits exist for µJ only (devices' are None).

Own pass first (`own_pass`): along the path tenant → root, every node's
usage within guarantees plus the request stays within its guarantee.

Surplus pass second (`within_allowance`, borrowing): every node on the path
stays within its guarantee plus its *allowance*, how far it may go above
its guarantee, computed root-down. The root's is 0 (its guarantee is the
cluster total). What a node can lend is its guarantee plus its own
allowance, less its direct usage, less what its children hold back by lend
limits; a child's allowance is its share of that, less every child's usage
up to its guarantee, by weight among the children that borrow (largest
remainder, ties to the smaller name: `borrower_share`), capped by the
child's borrow limit. A borrowing claim also counts the guarantee the other
branches hold back.
"""

from __future__ import annotations

from .fast.records import fit
from .fit import Fit
from .rollup import Rollup
from .tree import DEVICES, ENERGY, TenantTree, held_back

__all__ = ["DEVICES", "ENERGY", "borrower_share", "own_pass", "within_allowance", "within_guarantees"]


def within_guarantees(tree: TenantTree, usage: Rollup, tenant: str, uj: int, mdev: int) -> bool:
    """The common case, cheaply: every node on the path stays within its own
    guarantee in both dimensions even counting everything its subtree uses.
    Then the own pass holds and nothing borrows, so no allowance is needed."""
    energy, devices = usage.energy, usage.devices
    energy_guarantees, devices_guarantees = tree.energy.guarantees, tree.devices.guarantees
    for at in tree.at_path[tenant]:
        if energy[at].total + uj > energy_guarantees[at] or devices[at].total + mdev > devices_guarantees[at]:
            return False
    return True


def own_pass(tree: TenantTree, usage: Rollup, tenant: str, dim: str, amount: int) -> Fit:
    """The first node on the path whose usage within guarantees cannot take
    `amount` within its guarantee; ok with the tenant's figures when none."""
    guarantees, nodes = getattr(tree, dim).guarantees, getattr(usage, dim)
    for at in tree.at_path[tenant]:
        within = nodes[at].within
        if within + amount > guarantees[at]:
            return fit(False, tree.order[at], guarantees[at], within)
    at = tree.index[tenant]
    return fit(True, tenant, guarantees[at], nodes[at].within)


def within_allowance(tree: TenantTree, usage: Rollup, tenant: str, dim: str, amount: int, borrowing: bool) -> Fit:
    """Whether adding `amount` at `tenant` keeps every node on the path
    within its guarantee plus its allowance: the surplus pass when
    `borrowing`; without, whether a claim within its own guarantee fits once
    what is lent is taken back (RULES §6). The first (topmost) node that
    would not, else ok at the tenant."""
    quota, nodes = getattr(tree, dim), getattr(usage, dim)
    guarantees, lend_limits, borrow_limits = quota.guarantees, quota.lend_limits, quota.borrow_limits
    path = tree.at_path[tenant]
    allowance, limit = 0, None  # the root's: its guarantee is the cluster's total
    for depth in range(len(path) - 1, -1, -1):
        at = path[depth]
        node, guarantee = nodes[at], guarantees[at]
        # guarantee the children hold back by lend limits, but the claimant's
        # own branch (its own guarantee is its to use; without a lend limit it
        # holds nothing back)
        others_held = node.held_back
        if depth:
            child = path[depth - 1]
            if lend_limits[child] is not None:
                others_held -= held_back(guarantees[child], lend_limits[child], nodes[child].total)
        if node.total + amount + (others_held if borrowing else 0) - guarantee > allowance:
            return fit(False, tree.order[at], guarantee, node.total, allowance, limit)
        if not depth:
            return fit(True, tenant, guarantee, node.total, allowance, limit)
        below = nodes[child]
        if below.total + amount + (below.held_back if borrowing else 0) <= guarantees[child]:
            allowance = 0  # the child stays within its guarantee: it needs no share
        else:
            lendable = guarantee + allowance - node.direct - others_held
            allowance = borrower_share(tree, nodes, guarantees, at, child, amount, lendable)
        limit = borrow_limits[child]
        if limit is not None and allowance > limit:
            allowance = limit
    raise AssertionError("a path ends at the root")


def borrower_share(tree: TenantTree, nodes: list, guarantees: tuple[int, ...], parent: int, child: int,
                   amount: int, lendable: int) -> int:
    """`child`'s share of the surplus under `parent`: what the parent can
    lend, less each child's usage up to its guarantee (the claim's `amount`
    counted at `child`), split by weight among the children above their
    guarantee, largest remainder first, ties to the smaller name (RULES §3;
    as protos.energy `split`, without building every share). One pass over
    the children."""
    weights = tree.weights
    surplus, borrowers = lendable, []
    for k in tree.kids[parent]:
        used = nodes[k].total + (amount if k == child else 0)
        if used > guarantees[k]:
            surplus -= guarantees[k]
            borrowers.append(k)
        else:
            surplus -= used
    if child not in borrowers or surplus <= 0:
        return 0
    if len(borrowers) == 1:
        return surplus
    weight_sum = sum(weights[k] for k in borrowers)
    mine = surplus * weights[child]
    my_rest = mine % weight_sum
    floors = ahead = 0  # Σ floor shares; borrowers ranked before the child for the leftover units
    for k in borrowers:
        share = surplus * weights[k]
        floors += share // weight_sum
        rest = share % weight_sum
        ahead += rest > my_rest or (rest == my_rest and k < child)
    return mine // weight_sum + (ahead < surplus - floors)
