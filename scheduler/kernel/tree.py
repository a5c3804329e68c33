"""The entitlement tree (RULES §3), loaded and validated: its nodes, their
paths, and what it grants in each dimension (`Quota`). The usage rolled up
over it is rollup.py's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

from .snapshot import Tenant

# The two quantities the tree grants (RULES §3). Each names a `Quota` of the
# tree and a list of the roll-up (rollup.Rollup) by the same attribute.
ENERGY, DEVICES = "energy", "devices"


class TreeError(ValueError):
    """A configuration refused at load, naming the node at fault."""

    def __init__(self, node: str, message: str) -> None:
        super().__init__(f"tenant {node!r}: {message}")
        self.node = node


class Quota(NamedTuple):
    """What the tree grants in one dimension, per node by position in
    `TenantTree.order` (siblings in name order there, so positions order
    them like names). Borrow and lend limits are µJ only: devices' are None."""

    guarantees: tuple[int, ...]
    borrow_limits: tuple[int | None, ...]
    lend_limits: tuple[int | None, ...]


def held_back(guarantee: int, lend_limit: int | None, total: int) -> int:
    """Guarantee a node neither uses nor may lend (its lend limit): what it
    holds back from its siblings' borrowing."""
    return 0 if lend_limit is None else max(0, guarantee - lend_limit - total)


@dataclass(frozen=True, slots=True)
class TenantTree:
    root: str
    nodes: Mapping[str, Tenant]                # read-only views: the tree never changes
    children: Mapping[str, tuple[str, ...]]    # sorted child names
    paths: Mapping[str, tuple[str, ...]]       # (name, parent, ..., root)
    order: tuple[str, ...]  # parents before children, siblings by name

    index: Mapping[str, int]                   # name -> position in `order`
    # The same tree by position in `order`, for the entitlement hot paths:
    # a tuple index instead of a map lookup and an attribute per node.
    at_path: Mapping[str, tuple[int, ...]]     # path as positions, tenant first
    kids: tuple[tuple[int, ...], ...]          # children's positions
    weights: tuple[int, ...]
    energy: Quota                              # µJ (ENERGY)
    devices: Quota                             # milli-devices (DEVICES)

    def path(self, name: str) -> tuple[str, ...]:
        return self.paths[name]


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
    ordered = [nodes[n] for n in order]
    unlimited = (None,) * len(ordered)
    return TenantTree(roots[0], MappingProxyType(nodes), MappingProxyType({n: tuple(c) for n, c in children.items()}),
                      MappingProxyType(paths), tuple(order), MappingProxyType(index),
                      MappingProxyType({n: tuple(index[p] for p in path) for n, path in paths.items()}),
                      tuple(tuple(index[c] for c in children[n]) for n in order),
                      tuple(t.weight for t in ordered),
                      energy=Quota(tuple(t.guarantee_uj for t in ordered), tuple(t.borrow_limit_uj for t in ordered),
                                   tuple(t.lend_limit_uj for t in ordered)),
                      devices=Quota(tuple(t.guarantee_mdev for t in ordered), unlimited, unlimited))
