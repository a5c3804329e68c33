"""Which waiting shapes and gangs a state could admit: what an event that
frees capacity re-judges (schedule.decide), found through the shape index
(shapes.py) instead of by judging every shape.

A pending claim is admitted (admission.evaluate) in one of three ways, and
each needs something the state shows without judging the claim:

1. **Without victims.** It is placed on a live, uncordoned worker with the
   free milli-devices it asks for (placement.place lists only those), and
   its hold fits under the root's guarantee: every pass checks the root
   last, where the allowance is 0, so total + hold <= guarantee. A claim
   with no work class holds its declared estimate, graded Estimator, which
   may not borrow (RULES §4.4): it also fits its own guarantee along its
   path in both dimensions (the own pass; a claim above it in either
   borrows).
2. **Taking back what its tenant lent** (reclaim). Only while some admitted
   claim borrows, and only for a claim within its own guarantee in both
   dimensions (the own pass).
3. **Preempting lower-priority claims of its own tenant.** Only while its
   tenant has an admitted claim of lower priority.

A shape that none of the three allows cannot be admitted on this state, so
judging it would admit nothing: it is not judged, and its reason is computed
when asked (schedule.PendingReasons). The conditions are necessary, never
sufficient: a shape that meets one is judged, and may well wait. Each reads
the hold's lower bound (`Shape.floor_uj`: the hold is the declared estimate,
or more), so a work class's derived figure is never needed here.

`could_admit` is the rule, per shape; `movable` finds the shapes it allows
through the index (by GPU size and floor for 1, by tenant and priority for 2
and 3) and is tested against `could_admit` over every shape
(tests/kernel/test_incremental.py), as the conditions are against evaluate.

A gang is admitted whole, without victims: it can move when it is complete
and a member (any: each must fit on what the ones before it leave) meets
condition 1. Whether it can ever fit (gangs.never_fits) reads the tree, the
workers and the class statistics; a decision whose events change one of
them judges every gang (`every_gang`), since it may refuse one.
"""

from __future__ import annotations

from .entitlement import DEVICES, ENERGY, own_pass
from .shapes import Shape, gang_key, of_tenant, shape_of, sized, tenants
from .snapshot import ClusterState


class Room:
    """The figures the conditions read, for one state (kept while it is
    the state a decision judges on; per-tenant figures found when first asked)."""

    __slots__ = ("state", "root_uj", "free_mdev", "borrowing", "_lowest", "_own")

    def __init__(self, state: ClusterState) -> None:
        tree, usage = state.tree, state.usage
        self.state = state
        # the root's allowance is 0; before any configuration nothing can wait
        self.root_uj = tree.nodes[tree.root].guarantee_uj - usage[tree.root].energy.total if tree is not None else -1
        best = state.free_index.last()  # the most free milli-devices of any live, uncordoned worker
        self.free_mdev = best[0] if best is not None else -1
        self.borrowing = len(state.borrowed) > 0
        self._lowest: dict[str, int | None] = {}
        self._own: dict[str, bool] = {}

    def lowest_priority(self, tenant: str) -> int | None:
        """The lowest priority among the tenant's admitted claims; None when it has none."""
        if tenant not in self._lowest:
            ids = self.state.open_by_tenant.get(tenant)
            self._lowest[tenant] = min(ids.values()) if ids else None
        return self._lowest[tenant]

    def own_fits(self, tenant: str, uj: int, mdev: int) -> bool:
        state = self.state
        return (own_pass(state.tree, state.usage, tenant, ENERGY, uj).ok
                and own_pass(state.tree, state.usage, tenant, DEVICES, mdev).ok)

    def own_room(self, tenant: str) -> bool:
        """Whether anything at all fits the tenant's own guarantee (the own
        pass takes more the less it is asked)."""
        if tenant not in self._own:
            self._own[tenant] = self.own_fits(tenant, 0, 0)
        return self._own[tenant]

    # -- the three ways in, per shape --------------------------------------

    def fits_free(self, shape: Shape) -> bool:
        """1: a worker has its devices free, the root its hold, and an
        Estimator hold its own guarantee."""
        return (shape.gpu_mdev <= self.free_mdev and shape.floor_uj <= self.root_uj
                and (bool(shape.work_class) or self.own_fits(shape.tenant, shape.floor_uj, shape.gpu_mdev)))

    def may_reclaim(self, shape: Shape) -> bool:
        """2: something borrows, and the shape is within its own guarantee."""
        return self.borrowing and self.own_fits(shape.tenant, shape.floor_uj, shape.gpu_mdev)

    def outranks(self, shape: Shape) -> bool:
        """3: its tenant holds claims of lower priority."""
        lowest = self.lowest_priority(shape.tenant)
        return lowest is not None and lowest < shape.priority

    def could_admit(self, shape: Shape) -> bool:
        return self.outranks(shape) or self.may_reclaim(shape) or self.fits_free(shape)


def movable(room: Room, every_gang: bool = False) -> dict[tuple, tuple]:
    """The shapes and gangs `room`'s state could admit, as schedule's refs
    (("shape", shape) and ("gang", gang id)), each with the queue key of its
    first claim."""
    state, found = room.state, {}
    if not state.pending:
        return {}
    index = state.shapes
    for tenant in tenants(index):
        lowest = room.lowest_priority(tenant)
        if lowest is not None:
            found.update(of_tenant(index, tenant, lowest))                                         # 3
        if room.borrowing and room.own_room(tenant):
            found.update((s, key) for s, key in of_tenant(index, tenant) if room.may_reclaim(s))     # 2
    found.update((s, key) for s, key in sized(index, room.free_mdev, room.root_uj) if room.fits_free(s))  # 1
    refs = {("shape", s): key for s, key in found.items()}
    claims = state.claims
    for gang_id, members in state.gangs.items():
        if every_gang or gang_could_move(room, members):
            refs[("gang", gang_id)] = gang_key(claims, members)
    return refs


def gang_could_move(room: Room, members: tuple[str, ...]) -> bool:
    """A gang (its pending members' ids) is complete and a member meets condition 1."""
    claims = room.state.claims
    first = claims[members[0]].spec
    return len(members) >= first.gang_size and room.fits_free(shape_of(first))
