"""The roll-up's in-place half: within one edit batch (edit.py) the usage
lists and the `Usage` records in them are copied once, by the first change
that reaches them, and then changed in place; outside a batch every change
copies. rollup.bump calls these two; its plain twin is `rollup.rollup` from
scratch, and tests/kernel/test_rollup.py checks two batches against it (and
every state equals its `rebuild`, test_invariants)."""

from __future__ import annotations

from ..snapshot import Usage
from .edit import Edit


def copy(node: Usage, edit: Edit | None) -> Usage:
    """A copy of `node` to change, the batch's own (`edit`, the batch open
    here: its later changes are made in place)."""
    new = Usage(node.direct, node.total, node.within, node.held_back)
    if edit is not None:
        edit.own(new)
    return new


def writable(nodes: list[Usage], edit: Edit | None) -> list[Usage]:
    """`nodes` to write in place: a copy, except inside the edit batch that
    made it (`edit`, the batch open here: only its first change copies)."""
    if edit is not None and id(nodes) in edit.owned:
        return nodes
    nodes = list(nodes)
    if edit is not None:
        edit.own(nodes)
    return nodes
