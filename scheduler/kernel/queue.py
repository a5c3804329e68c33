"""The incremental queue (RULES §3 "Incremental queue"): `decide(state,
events, now_ns)`, the events applied, then only what they can make
admissible judged, as `schedule.schedule` (the full re-judge, its plain
twin) would judge it on a settled queue.

A decision leaves the queue *settled* (re-judging it would admit nothing),
so after a new claim only that claim (or its gang) needs judging: a claim
only consumes capacity. An event that frees capacity re-judges the shapes
and gangs the state it leads to could admit, one shape at a time: its first
claim, and the next one only if that one was admitted and the room left
could still take it.

What could admit a shape is `Room.could_admit`, the rule below. A pending
claim is admitted (admission.evaluate) in one of three ways, and each needs
something the state shows without judging the claim:

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

A gang is admitted whole, without victims: it can move when it is complete
and a member (any: each must fit on what the ones before it leave) meets
condition 1. Whether it can ever fit (gangs.gang_never_fits) reads the tree, the
workers and the class statistics; a decision whose events change one of
them judges every gang (`every_gang`), since it may refuse one.

Finding the shapes the rule allows without asking every shape is
fast/movable.py's, through the shape index (fast/shapes.py); it is tested
against `could_admit` over every shape (tests/kernel/test_incremental.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from heapq import heapify, heappop, heappush
from typing import NamedTuple

from .entitlement import DEVICES, ENERGY, own_pass
from .events import ClaimRefused, ClaimSubmitted, Event, Released
from .fast import movable as index, ranks
from .fast.shapes import Shape, first_of, gang_key, shape_of
from .reasons import ClaimState, Reason
from .schedule import Batch, Decision
from .snapshot import ClusterState
from .fast.members import ADMISSIBLE, PENDING


class ShapeRef(NamedTuple):
    """A shape of single pending claims to judge, first claim first."""

    shape: Shape


class GangRef(NamedTuple):
    """A gang to judge whole."""

    gang_id: str


class Frees:
    """An event freed capacity: judge what the state it leads to could admit."""

    __slots__ = ()


Ref = ShapeRef | GangRef
FREES = Frees()


class Room:
    """The figures the three conditions read, for one state (kept while it
    is the state a decision judges on; per-tenant figures found when first
    asked)."""

    __slots__ = ("state", "root_uj", "free_mdev", "borrowing", "_own")

    def __init__(self, state: ClusterState) -> None:
        tree, usage = state.tree, state.usage
        self.state = state
        # the root's allowance is 0; before any configuration nothing can wait
        self.root_uj = tree.nodes[tree.root].guarantee_uj - usage[tree.root].energy.total if tree is not None else -1
        best = state.free_index.last()  # the most free milli-devices of any live, uncordoned worker
        self.free_mdev = best[0] if best is not None else -1
        self.borrowing = len(state.borrowed) > 0
        self._own: dict[str, bool] = {}

    def lowest_priority(self, tenant: str) -> int | None:
        """The lowest priority among the tenant's admitted claims; None when it has none."""
        return ranks.lowest(self.state.admitted_by_tenant, tenant)

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
        return self.fits_free(shape) or self.may_reclaim(shape) or self.outranks(shape)

    def gang_could_move(self, members: tuple[str, ...]) -> bool:
        """A gang (its pending members' ids) is complete and a member meets condition 1."""
        first = self.state.claims[members[0]].spec
        return len(members) >= first.gang_size and self.fits_free(shape_of(first))


def movable(room: Room, every_gang: bool = False) -> dict[Ref, tuple]:
    """The shapes and gangs `room`'s state could admit, each with the queue
    key of its first claim (found through the index, fast/movable.py)."""
    shapes, gangs = index.movable(room, every_gang)
    refs: dict[Ref, tuple] = {ShapeRef(s): key for s, key in shapes.items()}
    refs.update((GangRef(g), key) for g, key in gangs.items())
    return refs


# What a given event leaves to judge: None for nothing. Anything not named
# here (a release or preemption of an admitted claim, a reclamation, a
# worker registering, growing, coming live or going, a configuration, a new
# period, metering or progress, which change what preempting a claim frees
# and in what order) re-judges what the state it leads to could admit.
def _new_claim(state: ClusterState, e: ClaimSubmitted) -> Ref:
    return GangRef(e.spec.gang_id) if e.spec.gang_id else ShapeRef(shape_of(e.spec))


def _frees_nothing(state: ClusterState, e: Event) -> None:
    return None


def _withdrawn(state: ClusterState, e: Released) -> Frees | None:
    """A pending claim withdrawn held nothing; an admitted one frees."""
    return None if state.claims[e.claim_id].state is PENDING else FREES


_JUDGES: dict[type, Callable[[ClusterState, Event], Ref | Frees | None]] = {
    ClaimSubmitted: _new_claim, ClaimRefused: _frees_nothing, Released: _withdrawn}


def _head(state: ClusterState, ref: Ref) -> tuple | None:
    """The queue key of a shape's first claim, or of a gang's first member."""
    if type(ref) is ShapeRef:
        return first_of(state.shapes, ref.shape)
    members = state.gangs.get(ref.gang_id)
    return gang_key(state.claims, members) if members else None


def _fit_inputs(state: ClusterState) -> tuple:
    """What decides whether a gang can ever fit (gangs.gang_never_fits)."""
    return state.tree, state.workers, state.class_stats


def decide(state: ClusterState, events: Iterable[Event], now_ns: int) -> Decision:
    """`events` applied, then decided: what they can make admissible judged,
    in queue order, as `schedule` would judge it on a settled queue. With no
    events (start-up, a new period), everything that could move is judged,
    and every gang.

    This is also the entry for "decide this new claim on this state": pass
    its ClaimSubmitted and read the decision (a dry run discards it)."""
    batch = Batch(state, now_ns)
    named: set[Ref | Frees | None] = set()
    given = False
    for event in events:
        given = True
        judge = _JUDGES.get(type(event))
        named.add(FREES if judge is None else judge(batch.state, event))
        batch.apply(event)
    named.discard(None)
    todo: dict[Ref, tuple | None] = {}
    if batch.roll() or not given or FREES in named:
        named.discard(FREES)
        every_gang = not given or any(a is not b for a, b in zip(_fit_inputs(batch.state), _fit_inputs(state)))
        todo = movable(Room(batch.state), every_gang)
    todo.update((ref, _head(batch.state, ref)) for ref in named if ref not in todo)
    while todo:
        _round(batch, todo)
        todo = movable(Room(batch.state)) if batch.preempted else {}
    return batch.decision()


def _round(batch: Batch, refs: dict[Ref, tuple | None]) -> None:
    """One pass over the given shapes and gangs, in queue order of their
    first claims. A shape whose first claim is not admitted is done for the
    round: the rest of it would be judged alike, and admissions only take
    capacity. So is one that the room left cannot admit (Room: what the
    event freed is used up), without judging it. A preemption frees
    capacity, so after one every shape and gang that could now move and
    whose first claim is still ahead joins the pass (those behind wait for
    the next round, as they wait for schedule's next pass)."""
    batch.preempted = False
    heap = [(head, ref) for ref, head in refs.items() if head is not None]
    heapify(heap)
    queued = {ref for _, ref in heap}
    room = None
    while heap:
        key, ref = heappop(heap)
        queued.discard(ref)
        if type(ref) is GangRef:
            batch.judge_gang(ref.gang_id)
            continue
        if room is None or room.state is not batch.state:
            room = Room(batch.state)
        if not room.could_admit(ref.shape):
            continue
        ev = batch.judge_claim(batch.state.claims[key[2]])
        if ev.reason is not ADMISSIBLE:
            continue
        others = movable(Room(batch.state)) if ev.victims else {ref: _head(batch.state, ref)}
        for other, head in others.items():
            if other not in queued and head is not None and head > key:
                heappush(heap, (head, other))
                queued.add(other)
