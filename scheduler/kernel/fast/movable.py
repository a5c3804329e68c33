"""The shapes and gangs a state could admit, found through the shape index
(fast/shapes.py) instead of by asking every shape: what an event that frees
capacity re-judges (queue.decide). The rule is queue.Room's (`could_admit`,
`gang_could_move`); its plain twin, the rule asked of every shape and gang,
is tests/kernel/test_incremental.py's `_plain_movable`, and this is tested
equal to it.

Condition 1 (fits what is free) is one range of the by-size index per GPU
size; conditions 2 and 3 (reclaim, outrank) one range of the by-shape index
per tenant, by priority.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .shapes import Shape, gang_key, of_tenant, sized, waiting_tenants

if TYPE_CHECKING:
    from ..queue import Room


def movable(room: Room, every_gang: bool = False) -> tuple[dict[Shape, tuple], dict[str, tuple]]:
    """The shapes and the gang ids `room`'s state could admit, each with the
    queue key of its first claim."""
    state, found = room.state, {}
    if not state.pending:
        return {}, {}
    index = state.shapes
    for tenant in waiting_tenants(index):
        lowest = room.lowest_priority(tenant)
        if lowest is not None:
            found.update(of_tenant(index, tenant, lowest))                                         # 3
        if room.borrowing and room.own_room(tenant):
            found.update((s, key) for s, key in of_tenant(index, tenant) if room.may_reclaim(s))     # 2
    found.update((s, key) for s, key in sized(index, room.free_mdev, room.root_uj) if room.fits_free(s))  # 1
    claims = state.claims
    gangs = {gang_id: gang_key(claims, members) for gang_id, members in state.gangs.items()
             if every_gang or room.gang_could_move(members)}
    return found, gangs
