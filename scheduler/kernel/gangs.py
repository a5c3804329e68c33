"""Gangs (RULES §4): all members placed and the whole gang's energy within
budget in one decision, or nothing. Members are judged one after another on a
scratch state holding the members already judged, so the gang's total is what
must fit; the scratch is discarded unless every member passes. Gangs do not
preempt.

A gang is refused (GANG_NEVER_FITS) when a necessary condition fails for the
members present, since more members only make it worse: its energy or
milli-devices above the root's guarantee, a member no empty registered worker
could take, more exclusive members than workers, more members than the
workers' concurrency allows, or a resource total above the cluster's.
"""

from __future__ import annotations

from collections.abc import Iterator

from .admission import Verdict, admit_events, evaluate
from .estimates import hold_for
from .limits import fits_no_worker
from .reasons import Placement, Reason
from .snapshot import SCALAR_FIELDS, Claim, ClusterState
from .transitions import apply
from .fast.members import ADMISSIBLE


def members(state: ClusterState, gang_id: str) -> list[Claim]:
    return sorted((state.claims[m] for m in state.gangs.get(gang_id, ())), key=lambda c: c.seq)


def complete(state: ClusterState, gang_id: str, size: int) -> bool:
    return len(state.gangs.get(gang_id, ())) >= size


def gang_never_fits(state: ClusterState, gang: list[Claim]) -> bool:
    root = state.tree.nodes[state.tree.root]
    holds = [hold_for(state, c.spec) for c in gang]
    if sum(h[0] for h in holds if isinstance(h, tuple)) > root.guarantee_uj:
        return True
    if sum(c.spec.resources.gpu_mdev for c in gang) > root.guarantee_mdev:
        return True
    workers = list(state.workers.values())
    if any(fits_no_worker(workers, c.spec) for c in gang):
        return True
    if sum(c.spec.placement is Placement.PLACEMENT_EXCLUSIVE for c in gang) > len(workers):
        return True
    if all(w.max_concurrency for w in workers) and len(gang) > sum(w.max_concurrency for w in workers):
        return True
    capacity = [sum(getattr(w.capacity, f) for w in workers) for f in SCALAR_FIELDS]
    asked = [sum(getattr(c.spec.resources, f) for c in gang) for f in SCALAR_FIELDS]
    return any(a > cap for a, cap in zip(asked, capacity))


def judged(state: ClusterState, gang: list[Claim], now_ns: int) -> Iterator[tuple[Claim, Verdict, ClusterState, list]]:
    """The members judged one after another: (member, its verdict, the
    scratch state it was judged on, the gang's events so far), up to and
    including the first that fails. Deciding and explaining a gang both walk
    this, so an explanation is the decision's own."""
    scratch, events = state, []
    for member in gang:
        ev = evaluate(scratch, member, now_ns, may_preempt=False)
        yield member, ev, scratch, events
        if ev.reason is not ADMISSIBLE:
            return
        for event in admit_events(scratch, member, ev, now_ns):
            events.append(event)
            scratch = apply(scratch, event)


def decide_gang(state: ClusterState, gang: list[Claim], now_ns: int) -> tuple[Reason, list, Verdict | None]:
    """(reason, events, failing verdict) for a complete gang."""
    events: list = []
    for _member, ev, _scratch, events in judged(state, gang, now_ns):
        if ev.reason is not ADMISSIBLE:
            return ev.reason, [], ev
    return ADMISSIBLE, events, None
