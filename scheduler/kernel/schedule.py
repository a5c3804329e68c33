"""The pending queue, judged. Two entries, one outcome:

- `schedule(state, now_ns)`, the full re-judge: every pending claim in queue
  order (priority descending, then submission sequence), pass after pass
  while a pass preempts. A claim that cannot be admitted does not block the
  ones behind it (best effort), and a gang is decided at its first member's
  place. It is the plain form, what start-up and the property tests use.
- `decide(state, events, now_ns)`, the incremental one: `events` applied,
  then only what they can make admissible judged. A decision leaves the queue
  *settled* (re-judging it would admit nothing), so after a new claim only
  that claim (or its gang) needs judging: a claim only consumes capacity. An
  event that frees capacity re-judges the shapes and gangs the state it
  leads to could admit (movable.py, found through the shape index of
  shapes.py), one shape at a time: its first claim, and the next one only if
  that one was admitted and the room left could still take it.

Both return the events that carry the decisions out, a reason per claim
judged, and the state they lead to. Why each pending claim waits is its
verdict on the settled state, computed when asked (`PendingReasons`), which
is what a full re-judge of that state gives.

A decision is one edit batch (edit.py), open only while the decision
applies its own events: evaluation only reads its states, and the trial
states of preemption and gangs are made outside the batch, so nothing in it
sees a state after it has been edited further.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from heapq import heapify, heappop, heappush

from . import gangs
from .admission import Evaluation, admit_events, evaluate
from . import edit
from .edit import Edit
from .events import ClaimRefused, ClaimSubmitted, Event, PeriodRolled, Preempted, Released
from .reasons import ClaimState, Reason
from .movable import Room, movable
from .shapes import first_of, gang_key, shape_of
from .snapshot import Claim, ClusterState
from .transitions import apply

# members read on every decision, bound once (reasons.py says why)
_PENDING, _ADMISSIBLE = ClaimState.PENDING, Reason.ADMISSIBLE


@dataclass(frozen=True, slots=True)
class Decision:
    events: tuple[Event, ...]                # what the decision adds (not the events it was given)
    reasons: tuple[tuple[str, Reason], ...]  # per claim judged, its last verdict (in the order first judged)
    state: ClusterState                      # == the fold of apply over the given events, then `events`


def period_roll(state: ClusterState, now_ns: int) -> PeriodRolled | None:
    """The event opening the accounting period that contains `now_ns`, if it
    is not the current one. A period of 0 ns is "none": one lifetime period."""
    if not state.period_ns or now_ns < state.epoch_ns:
        return None
    index = (now_ns - state.epoch_ns) // state.period_ns
    return PeriodRolled(index) if index > state.period_index else None


class _Batch:
    """One decision's events and the state they lead to, applied in place."""

    __slots__ = ("state", "events", "reasons", "edit", "now_ns", "preempted")

    def __init__(self, state: ClusterState, now_ns: int) -> None:
        self.state, self.now_ns, self.edit = state, now_ns, Edit()
        self.events: list[Event] = []
        self.reasons: list[tuple[str, Reason]] = []
        self.preempted = False

    def emit(self, new: Iterable[Event]) -> None:
        for event in new:
            self.events.append(event)
            self.preempted |= type(event) is Preempted
            self.apply(event)

    def apply(self, event: Event) -> None:
        """The state after `event`, made in place where this batch made it:
        the batch is open only here, so judging and trials copy as always."""
        token = edit.OPEN.set(self.edit)  # `with self.edit`, without two Python calls per event
        try:
            self.state = apply(self.state, event)
        finally:
            edit.OPEN.reset(token)

    def roll(self) -> bool:
        roll = period_roll(self.state, self.now_ns)
        if roll is not None:
            self.emit([roll])
        return roll is not None

    def judge_claim(self, claim: Claim) -> Evaluation:
        """Decide one single pending claim; its evaluation."""
        ev = evaluate(self.state, claim, self.now_ns, record=False)
        self.reasons.append((claim.claim_id, ev.reason))
        if ev.reason is _ADMISSIBLE:
            self.emit(admit_events(self.state, claim, ev, self.now_ns))
        return ev

    def judge_gang(self, gang_id: str) -> None:
        """Decide a gang whole (RULES §4): refused if it can never fit,
        waiting while incomplete, else all admitted or none."""
        state = self.state
        members = gangs.members(state, gang_id)
        if gangs.never_fits(state, members):
            reason = Reason.GANG_NEVER_FITS
            self.emit([ClaimRefused(m.claim_id, reason, self.now_ns) for m in members])
        elif not gangs.complete(state, gang_id, members[0].spec.gang_size):
            reason = Reason.GANG_INCOMPLETE
        else:
            reason, new, _ = gangs.decide_gang(state, members, self.now_ns)
            self.emit(new)
        self.reasons.extend((m.claim_id, reason) for m in members)

    def decision(self) -> Decision:
        return Decision(tuple(self.events), tuple(dict(self.reasons).items()), self.state)


def schedule(state: ClusterState, now_ns: int) -> Decision:
    """The full re-judge. A pass that preempts may free more than its
    claims needed, for claims it had already judged: then another pass."""
    batch = _Batch(state, now_ns)
    batch.roll()
    while True:
        batch.preempted = False
        seen_gangs: set[str] = set()
        for _, _, claim_id in batch.state.pending:
            claim = batch.state.claims[claim_id]
            gang_id = claim.spec.gang_id
            if claim.state is not _PENDING or gang_id in seen_gangs:
                continue  # decided with its gang
            if gang_id:
                seen_gangs.add(gang_id)
                batch.judge_gang(gang_id)
            else:
                batch.judge_claim(claim)
        if not batch.preempted:
            return batch.decision()


# What a given event leaves to judge: None for nothing. Anything not named
# here (a release or preemption of an admitted claim, a reclamation, a
# worker registering, growing, coming live or going, a configuration, a new
# period, metering or progress, which change what preempting a claim frees
# and in what order) re-judges what the state it leads to could admit
# (movable.py).
def _new_claim(state: ClusterState, e: ClaimSubmitted) -> tuple:
    return ("gang", e.spec.gang_id) if e.spec.gang_id else ("shape", shape_of(e.spec))


def _frees_nothing(state: ClusterState, e: Event) -> None:
    return None


def _withdrawn(state: ClusterState, e: Released) -> tuple | None:
    """A pending claim withdrawn held nothing; an admitted one frees."""
    return None if state.claims[e.claim_id].state is _PENDING else _FREES


_FREES = ("frees",)
_JUDGES: dict[type, Callable[[ClusterState, Event], tuple | None]] = {
    ClaimSubmitted: _new_claim, ClaimRefused: _frees_nothing, Released: _withdrawn}


def _head(state: ClusterState, ref: tuple) -> tuple | None:
    """The queue key of a shape's first claim, or of a gang's first member."""
    kind, name = ref
    if kind == "shape":
        return first_of(state.shapes, name)
    members = state.gangs.get(name)
    return gang_key(state.claims, members) if members else None


def _fit_inputs(state: ClusterState) -> tuple:
    """What decides whether a gang can ever fit (gangs.never_fits)."""
    return state.tree, state.workers, state.class_stats


def decide(state: ClusterState, events: Iterable[Event], now_ns: int) -> Decision:
    """`events` applied, then decided: what they can make admissible judged,
    in queue order, as `schedule` would judge it on a settled queue. With no
    events (start-up, a new period), everything that could move is judged,
    and every gang.

    This is also the entry for "decide this new claim on this state": pass
    its ClaimSubmitted and read the decision (a dry run discards it)."""
    batch = _Batch(state, now_ns)
    named: set[tuple] = set()
    given = False
    for event in events:
        given = True
        judge = _JUDGES.get(type(event))
        named.add(_FREES if judge is None else judge(batch.state, event))
        batch.apply(event)
    named.discard(None)
    todo: dict[tuple, tuple | None] = {}
    if batch.roll() or not given or _FREES in named:
        named.discard(_FREES)
        every_gang = not given or any(a is not b for a, b in zip(_fit_inputs(batch.state), _fit_inputs(state)))
        todo = movable(Room(batch.state), every_gang)
    todo.update((ref, _head(batch.state, ref)) for ref in named if ref not in todo)
    while todo:
        _round(batch, todo)
        todo = movable(Room(batch.state)) if batch.preempted else {}
    return batch.decision()


def _round(batch: _Batch, refs: dict[tuple, tuple | None]) -> None:
    """One pass over the given shapes and gangs, in queue order of their
    first claims. A shape whose first claim is not admitted is done for the
    round: the rest of it would be judged alike, and admissions only take
    capacity. So is one that the room left cannot admit (movable.Room:
    what the event freed is used up), without judging it. A preemption
    frees capacity, so after one every shape and gang that could now move
    and whose first claim is still ahead joins the pass (those behind wait
    for the next round, as they wait for schedule's next pass)."""
    batch.preempted = False
    heap = [(head, ref) for ref, head in refs.items() if head is not None]
    heapify(heap)
    queued = {ref for _, ref in heap}
    room = None
    while heap:
        key, ref = heappop(heap)
        queued.discard(ref)
        if ref[0] == "gang":
            batch.judge_gang(ref[1])
            continue
        if room is None or room.state is not batch.state:
            room = Room(batch.state)
        if not room.could_admit(ref[1]):
            continue
        ev = batch.judge_claim(batch.state.claims[key[2]])
        if ev.reason is not _ADMISSIBLE:
            continue
        others = movable(Room(batch.state)) if ev.victims else {ref: _head(batch.state, ref)}
        for other, head in others.items():
            if other not in queued and head is not None and head > key:
                heappush(heap, (head, other))
                queued.add(other)


class PendingReasons(Mapping):
    """Why each pending claim of a settled state waits: its verdict on that
    state, computed when first asked and kept (one evaluation per shape,
    whatever the queue's depth)."""

    def __init__(self, state: ClusterState, now_ns: int = 0) -> None:
        self.state, self._now_ns = state, now_ns
        self._by_shape: dict[tuple, Reason] = {}
        self._by_gang: dict[str, Reason] = {}

    def __getitem__(self, claim_id: str) -> Reason:
        claim = self.state.claims.get(claim_id)
        if claim is None or claim.state is not _PENDING:
            raise KeyError(claim_id)
        gang_id = claim.spec.gang_id
        if gang_id:
            if gang_id not in self._by_gang:
                batch = _Batch(self.state, self._now_ns)
                batch.judge_gang(gang_id)  # judged on a batch of its own, then discarded
                self._by_gang[gang_id] = batch.reasons[0][1]
            return self._by_gang[gang_id]
        shape = shape_of(claim.spec)
        if shape not in self._by_shape:
            self._by_shape[shape] = evaluate(self.state, claim, self._now_ns, record=False).reason
        return self._by_shape[shape]

    def __iter__(self) -> Iterator[str]:
        return (claim_id for _, _, claim_id in self.state.pending)

    def __len__(self) -> int:
        return len(self.state.pending)
