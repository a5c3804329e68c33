"""Each tree node's usage rolled up (RULES §3), per dimension: `rollup`
recomputes it from every node's direct usage; `bump` applies one change
along one path, O(depth) per dimension it changes. The two always agree
(property-tested: every state equals its `rebuild`).

A change adds to the tenant's direct usage and to every total up its path;
each parent's usage within guarantees gains what its child's gained, up to
the child's guarantee, and what its children hold back by lend limits moves
with the child's total (Kueue's `addUsage`, bubbling up its cohorts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .fast.rollup import copy as copied, writable
from .fast.edit import Edit, current
from .snapshot import NodeUsage, Usage
from .tree import Quota, TenantTree, held_back


@dataclass(frozen=True, slots=True)
class Rollup:
    """Every node's usage in tree order, one list per dimension: `energy`
    and `devices` (tree.ENERGY, tree.DEVICES), read by position in the hot
    paths (`tree.at_path`) and by name through `rollup[name]`.

    A list, and a Usage record in it, is never changed once made, except
    by the edit batch that made it (fast/rollup.py: `writable` and `copy`,
    the two lines of `bump` that read the batch)."""

    index: Mapping[str, int]
    energy: list[Usage]    # µJ
    devices: list[Usage]   # milli-devices

    def __getitem__(self, name: str) -> NodeUsage:
        at = self.index[name]
        return NodeUsage(self.energy[at], self.devices[at])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rollup) and self.energy == other.energy and self.devices == other.devices

    __hash__ = None  # type: ignore[assignment]


def rollup(tree: TenantTree, direct: Mapping[str, tuple[int, int]]) -> Rollup:
    """Full recomputation from each node's direct (µJ, milli-devices) usage."""
    energy = _rolled_up(tree, tree.energy, {name: uj for name, (uj, _) in direct.items()})
    devices = _rolled_up(tree, tree.devices, {name: mdev for name, (_, mdev) in direct.items()})
    return Rollup(tree.index, energy, devices)


def _rolled_up(tree: TenantTree, quota: Quota, direct: Mapping[str, int]) -> list[Usage]:
    """One dimension's usage of every node, leaves up."""
    out: list[Usage] = [Usage()] * len(tree.order)
    guarantees, lend_limits = quota.guarantees, quota.lend_limits
    for at in reversed(range(len(tree.order))):
        own = direct.get(tree.order[at], 0)
        total = within = own
        held = 0
        for child in tree.kids[at]:
            below = out[child]
            total += below.total
            within += min(guarantees[child], below.within)
            held += held_back(guarantees[child], lend_limits[child], below.total)
        out[at] = Usage(own, total, within, held)
    return out


def bump(tree: TenantTree, usage: Rollup, tenant: str, d_uj: int, d_mdev: int) -> Rollup:
    """`usage` with (d_uj, d_mdev) added to `tenant`'s direct usage and its
    ancestors fixed: O(depth) per dimension it changes."""
    path, edit = tree.at_path[tenant], current()
    energy = _added(tree.energy, writable(usage.energy, edit), path, d_uj, edit) if d_uj else usage.energy
    devices = _added(tree.devices, writable(usage.devices, edit), path, d_mdev, edit) if d_mdev else usage.devices
    if energy is usage.energy and devices is usage.devices:
        return usage
    return Rollup(usage.index, energy, devices)


def _added(quota: Quota, nodes: list[Usage], path: tuple[int, ...], amount: int, edit: Edit | None) -> list[Usage]:
    """`nodes`, one dimension's usage (writable), with `amount` added to the
    direct usage of the path's first node and to every total up the path."""
    guarantees, lend_limits = quota.guarantees, quota.lend_limits
    owned = edit.owned if edit is not None else {}
    direct_gain = within_gain = amount
    held_gain = 0
    for at in path:
        node = nodes[at]
        if id(node) not in owned:  # made before this batch (or outside any): changed on a copy
            node = nodes[at] = copied(node, edit)
        total, before = node.total, node.within
        node.direct += direct_gain
        node.total = total + amount
        node.within = after = before + within_gain
        node.held_back += held_gain
        direct_gain = 0  # only the tenant's own direct usage changes
        # what the parent's within usage gains: this node's, up to its guarantee ...
        guarantee, lend_limit = guarantees[at], lend_limits[at]
        within_gain = (guarantee if after > guarantee else after) - (guarantee if before > guarantee else before)
        # ... and what the parent's children hold back: this node's guarantee
        # that its lend limit keeps and it does not use (nothing without a limit)
        held_gain = 0 if lend_limit is None else (held_back(guarantee, lend_limit, total + amount)
                                                  - held_back(guarantee, lend_limit, total))
    return nodes
