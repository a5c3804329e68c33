"""The pending queue, walked: `schedule(state, now_ns)` decides every pending
claim in order (priority descending, then submission sequence) and returns
the events that carry the decisions out, a reason per claim, and the state
they lead to. A claim that cannot be admitted does not block the ones behind
it (best effort), and a gang is decided at its first member's place.

The states judged in the pass are the batch's (edit.py): evaluation only
reads them, and the trial states of preemption and gangs are made without the
Edit, so nothing in the pass sees a state after it has been edited further.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import gangs
from .admission import admit_events, evaluate
from .edit import Edit
from .events import ClaimRefused, Event, PeriodRolled
from .reasons import ClaimState, Reason
from .snapshot import ClusterState
from .transitions import apply

# members read on every decision, bound once (reasons.py says why)
_PENDING, _ADMISSIBLE = ClaimState.PENDING, Reason.ADMISSIBLE


@dataclass(frozen=True, slots=True)
class Decision:
    events: tuple[Event, ...]
    reasons: tuple[tuple[str, Reason], ...]  # per pending claim considered, in queue order
    state: ClusterState                      # == the fold of apply over `events`


def period_roll(state: ClusterState, now_ns: int) -> PeriodRolled | None:
    """The event opening the accounting period that contains `now_ns`, if it
    is not the current one. A period of 0 ns is "none": one lifetime period."""
    if not state.period_ns or now_ns < state.epoch_ns:
        return None
    index = (now_ns - state.epoch_ns) // state.period_ns
    return PeriodRolled(index) if index > state.period_index else None


def schedule(state: ClusterState, now_ns: int) -> Decision:
    events: list[Event] = []
    reasons: list[tuple[str, Reason]] = []
    edit = Edit()  # the pass is one batch: its decisions are applied in place (edit.py)

    def emit(new: list[Event]) -> None:
        nonlocal state
        for event in new:
            events.append(event)
            state = apply(state, event, edit)

    roll = period_roll(state, now_ns)
    if roll is not None:
        emit([roll])
    seen_gangs: set[str] = set()
    for _, _, claim_id in state.pending:
        claim = state.claims[claim_id]
        gang_id = claim.spec.gang_id
        if claim.state is not _PENDING or gang_id in seen_gangs:
            continue  # decided with its gang
        if not gang_id:
            ev = evaluate(state, claim, now_ns, record=False)
            reasons.append((claim_id, ev.reason))
            if ev.reason is _ADMISSIBLE:
                emit(admit_events(state, claim, ev, now_ns))
            continue
        seen_gangs.add(gang_id)
        members = gangs.members(state, gang_id)
        if gangs.never_fits(state, members):
            reason = Reason.GANG_NEVER_FITS
            emit([ClaimRefused(m.claim_id, reason, now_ns) for m in members])
        elif not gangs.complete(state, gang_id, claim.spec.gang_size):
            reason = Reason.GANG_INCOMPLETE
        else:
            reason, new, _ = gangs.decide_gang(state, members, now_ns)
            emit(new)
        reasons.extend((m.claim_id, reason) for m in members)
    return Decision(tuple(events), tuple(reasons), state)
