"""The pending queue, judged (RULES §3 "The queue"): `schedule(state,
now_ns)`, the full re-judge: every pending claim in queue order (priority
descending, then submission sequence), pass after pass while a pass
preempts. A claim that cannot be admitted does not block the ones behind it
(best effort), and a gang is decided at its first member's place. It is the
plain form, what start-up and the property tests use; the incremental one,
`decide`, is queue.py's and is tested equal to it.

Both return the events that carry the decisions out, a reason per claim
judged, and the state they lead to. Why each pending claim waits is its
verdict on the settled state, computed when asked (`PendingReasons`), which
is what a full re-judge of that state gives.

A decision is one edit batch (fast/edit.py), open only while the decision
applies its own events: evaluation only reads its states, and the trial
states of preemption and gangs are made outside the batch, so nothing in it
sees a state after it has been edited further.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from . import gangs
from .admission import Verdict, admit_events, evaluate
from . import transitions
from .events import ClaimRefused, ClaimSubmitted, Event, PeriodRolled, Preempted, Released
from .reasons import ClaimState, Reason
from .fast.shapes import shape_of
from .snapshot import Claim, ClusterState
from .fast.members import ADMISSIBLE, PENDING


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


class Batch(transitions.Batch):
    """One decision: its events, a reason per claim judged, and the state
    they lead to, applied in one edit batch."""

    __slots__ = ("events", "reasons", "now_ns", "preempted")

    def __init__(self, state: ClusterState, now_ns: int) -> None:
        super().__init__(state)
        self.now_ns = now_ns
        self.events: list[Event] = []
        self.reasons: list[tuple[str, Reason]] = []
        self.preempted = False

    def emit(self, new: Iterable[Event]) -> None:
        for event in new:
            self.events.append(event)
            self.preempted |= type(event) is Preempted
            self.apply(event)

    def roll(self) -> bool:
        roll = period_roll(self.state, self.now_ns)
        if roll is not None:
            self.emit([roll])
        return roll is not None

    def judge_claim(self, claim: Claim) -> Verdict:
        """Decide one single pending claim; its verdict."""
        ev = evaluate(self.state, claim, self.now_ns)
        self.reasons.append((claim.claim_id, ev.reason))
        if ev.reason is ADMISSIBLE:
            self.emit(admit_events(self.state, claim, ev, self.now_ns))
        return ev

    def judge_gang(self, gang_id: str) -> None:
        """Decide a gang whole (RULES §4): refused if it can never fit,
        waiting while incomplete, else all admitted or none."""
        state = self.state
        members = gangs.members(state, gang_id)
        if gangs.gang_never_fits(state, members):
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
    batch = Batch(state, now_ns)
    batch.roll()
    while True:
        batch.preempted = False
        seen_gangs: set[str] = set()
        for _, _, claim_id in batch.state.pending:
            claim = batch.state.claims[claim_id]
            gang_id = claim.spec.gang_id
            if claim.state is not PENDING or gang_id in seen_gangs:
                continue  # decided with its gang
            if gang_id:
                seen_gangs.add(gang_id)
                batch.judge_gang(gang_id)
            else:
                batch.judge_claim(claim)
        if not batch.preempted:
            return batch.decision()


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
        if claim is None or claim.state is not PENDING:
            raise KeyError(claim_id)
        gang_id = claim.spec.gang_id
        if gang_id:
            if gang_id not in self._by_gang:
                batch = Batch(self.state, self._now_ns)
                batch.judge_gang(gang_id)  # judged on a batch of its own, then discarded
                self._by_gang[gang_id] = batch.reasons[0][1]
            return self._by_gang[gang_id]
        shape = shape_of(claim.spec)
        if shape not in self._by_shape:
            self._by_shape[shape] = evaluate(self.state, claim, self._now_ns).reason
        return self._by_shape[shape]

    def __iter__(self) -> Iterator[str]:
        return (claim_id for _, _, claim_id in self.state.pending)

    def __len__(self) -> int:
        return len(self.state.pending)
