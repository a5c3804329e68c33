"""The entitlement tree (RULES §3): load and validate, then keep each node's
usage rolled up. `rollup` recomputes from scratch; `bump` applies one change
along one path in O(depth), and the two always agree (property-tested)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from .edit import current
from .snapshot import NodeUsage, Tenant


class TreeError(ValueError):
    """A configuration refused at load, naming the node at fault."""

    def __init__(self, node: str, message: str) -> None:
        super().__init__(f"tenant {node!r}: {message}")
        self.node = node


@dataclass(frozen=True, slots=True)
class TenantTree:
    root: str
    nodes: Mapping[str, Tenant]                # read-only views: the tree never changes
    children: Mapping[str, tuple[str, ...]]    # sorted child names
    paths: Mapping[str, tuple[str, ...]]       # (name, parent, ..., root)
    order: tuple[str, ...]  # parents before children, siblings by name

    index: Mapping[str, int]                   # name -> position in `order`
    # The same tree by position in `order`, for the entitlement hot paths:
    # tuple indexing instead of a map lookup and an attribute per node.
    # Siblings are in name order there, so positions order them like names.
    at_path: Mapping[str, tuple[int, ...]]     # path as positions, tenant first
    kids: tuple[tuple[int, ...], ...]          # children's positions
    guarantees: tuple[tuple[int, ...], tuple[int, ...]]  # (µJ, mdev), per position
    weights: tuple[int, ...]
    borrow_limits: tuple[int | None, ...]
    lend_limits: tuple[int | None, ...]

    def path(self, name: str) -> tuple[str, ...]:
        return self.paths[name]

    def guarantee(self, name: str) -> tuple[int, int]:
        node = self.nodes[name]
        return node.guarantee_uj, node.guarantee_mdev


def _check_fields(t: Tenant) -> None:
    if not t.name:
        raise TreeError(t.name, "a tenant needs a name")
    if t.weight < 1:
        raise TreeError(t.name, f"weight must be >= 1, got {t.weight}")
    for label in ("guarantee_uj", "guarantee_mdev", "borrow_limit_uj", "lend_limit_uj"):
        value = getattr(t, label)
        if value is not None and value < 0:
            raise TreeError(t.name, f"{label} must not be negative, got {value}")


def load_tree(tenants: Iterable[Tenant]) -> TenantTree:
    nodes: dict[str, Tenant] = {}
    for t in tenants:
        _check_fields(t)
        if t.name in nodes:
            raise TreeError(t.name, "declared twice")
        nodes[t.name] = t
    roots = sorted(n for n, t in nodes.items() if not t.parent)
    if len(roots) != 1:
        raise TreeError(roots[1] if roots else "", f"the tree needs exactly one root, found {len(roots)}")
    children: dict[str, list[str]] = {n: [] for n in nodes}
    for name in sorted(nodes):
        parent = nodes[name].parent
        if parent and parent not in nodes:
            raise TreeError(name, f"unknown parent {parent!r}")
        if parent:
            children[parent].append(name)
    order = [roots[0]]
    for name in order:  # grows while iterating: breadth first
        order.extend(children[name])
    if len(order) != len(nodes):
        stray = min(set(nodes) - set(order))
        raise TreeError(stray, "is on a cycle: it does not lead to the root")
    paths: dict[str, tuple[str, ...]] = {roots[0]: (roots[0],)}
    for name in order[1:]:
        paths[name] = (name, *paths[nodes[name].parent])
    for name in order:
        kids = [nodes[c] for c in children[name]]
        for label in ("guarantee_uj", "guarantee_mdev"):
            below = sum(getattr(k, label) for k in kids)
            if below > getattr(nodes[name], label):
                raise TreeError(name, f"children's {label} sum to {below}, above the node's {getattr(nodes[name], label)}")
    index = {n: i for i, n in enumerate(order)}
    tenants_in_order = [nodes[n] for n in order]
    return TenantTree(roots[0], MappingProxyType(nodes), MappingProxyType({n: tuple(c) for n, c in children.items()}),
                      MappingProxyType(paths), tuple(order), MappingProxyType(index),
                      MappingProxyType({n: tuple(index[p] for p in path) for n, path in paths.items()}),
                      tuple(tuple(index[c] for c in children[n]) for n in order),
                      (tuple(t.guarantee_uj for t in tenants_in_order), tuple(t.guarantee_mdev for t in tenants_in_order)),
                      tuple(t.weight for t in tenants_in_order), tuple(t.borrow_limit_uj for t in tenants_in_order),
                      tuple(t.lend_limit_uj for t in tenants_in_order))


def _locked(t: Tenant, total_uj: int) -> int:
    """Guarantee a node neither uses nor may lend (its lend limit)."""
    return _held(t.guarantee_uj, t.lend_limit_uj, total_uj)


def _held(guarantee_uj: int, lend_limit_uj: int | None, total_uj: int) -> int:
    return 0 if lend_limit_uj is None else max(0, guarantee_uj - lend_limit_uj - total_uj)


@dataclass(frozen=True, slots=True)
class Rollup:
    """Every node's NodeUsage, in tree order: a flat list is cheaper to
    update along one path than a map, and the tree never changes under it.
    The list is never changed once made, except by the Edit that made it."""

    index: Mapping[str, int]
    values: list[NodeUsage]

    def __getitem__(self, name: str) -> NodeUsage:
        return self.values[self.index[name]]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rollup) and self.values == other.values

    __hash__ = None  # type: ignore[assignment]


def rollup(tree: TenantTree, direct: Mapping[str, tuple[int, int]]) -> Rollup:
    """Full recomputation from each node's direct (µJ, mdev) usage."""
    out: dict[str, NodeUsage] = {}
    for name in reversed(tree.order):
        d_uj, d_mdev = direct.get(name, (0, 0))
        total_uj, inner_uj, locked, total_mdev, inner_mdev = d_uj, d_uj, 0, d_mdev, d_mdev
        for child in tree.children[name]:
            u, t = out[child], tree.nodes[child]
            total_uj += u.total_uj
            total_mdev += u.total_mdev
            inner_uj += min(t.guarantee_uj, u.inner_uj)
            inner_mdev += min(t.guarantee_mdev, u.inner_mdev)
            locked += _locked(t, u.total_uj)
        out[name] = NodeUsage(d_uj, total_uj, inner_uj, locked, d_mdev, total_mdev, inner_mdev)
    return Rollup(tree.index, [out[name] for name in tree.order])


def bump(tree: TenantTree, usage: Rollup, tenant: str, d_uj: int, d_mdev: int) -> Rollup:
    """Add (d_uj, d_mdev) to `tenant`'s direct usage, fixing its ancestors
    (by position: this runs on every admission and settlement). Outside an
    edit batch the list is copied; inside one, only the first time."""
    if not d_uj and not d_mdev:
        return usage
    values, edit = usage.values, current()
    if edit is None or id(values) not in edit.owned:
        values = list(values)
        if edit is not None:
            edit.own(values)
    (g_uj, g_mdev), lend = tree.guarantees, tree.lend_limits
    in_uj, in_mdev, d_locked, direct_uj, direct_mdev = d_uj, d_mdev, 0, d_uj, d_mdev
    for at in tree.at_path[tenant]:
        o_direct_uj, o_total_uj, o_inner_uj, o_locked, o_direct_mdev, o_total_mdev, o_inner_mdev = values[at]
        total_uj, inner_uj, inner_mdev = o_total_uj + d_uj, o_inner_uj + in_uj, o_inner_mdev + in_mdev
        # tuple.__new__ skips NamedTuple's Python-level __new__: this runs per node on every admission
        values[at] = tuple.__new__(NodeUsage, (o_direct_uj + direct_uj, total_uj, inner_uj, o_locked + d_locked,
                                               o_direct_mdev + direct_mdev, o_total_mdev + d_mdev, inner_mdev))
        direct_uj = direct_mdev = 0  # only the tenant's own direct usage changes
        # what the parent's inner usage gains: this node's, capped at its guarantee
        # (conditionals rather than min(): four calls per node add up here)
        g, g_m, limit = g_uj[at], g_mdev[at], lend[at]
        in_uj = (g if inner_uj > g else inner_uj) - (g if o_inner_uj > g else o_inner_uj)
        in_mdev = (g_m if inner_mdev > g_m else inner_mdev) - (g_m if o_inner_mdev > g_m else o_inner_mdev)
        d_locked = 0 if limit is None else _held(g, limit, total_uj) - _held(g, limit, o_total_uj)
    return usage if values is usage.values else Rollup(usage.index, values)
