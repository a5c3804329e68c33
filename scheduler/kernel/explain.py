"""Explain (RULES §5): why a claim is where it is. For a pending claim, every
entitlement check of §3 with its figures, then every worker with ok, reason
and per-field figures; the headline is the first failing check. For an
admitted claim, the checks it passed (with today's figures) and where it sits.

One explanation never contradicts itself: a pending gang member shows the
checks and worker rows of the member that blocks its gang (judged, as the
decision judges it, on the state holding the members before it), so the
headline is always the failing check's reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from operator import is_
from typing import NamedTuple

from . import gangs
from .admission import EntitlementCheck, evaluate
from .placement import FieldFigure, adjust, field_figures, reasoner
from .reasons import CheckStep, ClaimState, ErrorCode, KernelError, Reason
from .fast.shapes import pending_key
from .snapshot import Claim, ClusterState, DeviceShare, Resources, Worker, WorkerLoad


class WorkerExplanation(NamedTuple):
    """One worker's verdict (a NamedTuple: explain builds one per worker)."""

    worker: str
    ok: bool
    reason: Reason
    capacity: Worker
    load: WorkerLoad
    requested: Resources

    @property
    def fields(self) -> tuple[FieldFigure, ...]:
        """Per-field figures, computed on demand (an explain over every worker
        only pays for the ones read)."""
        return field_figures(self.capacity, self.load, self.requested)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return self.capacity.capacity.gpu_types

    @property
    def detail(self) -> str:
        """One sentence for the reasons that figures do not show."""
        worker, wanted = self.capacity, self.requested.gpu_types
        if self.reason is Reason.WORKER_INELIGIBLE:
            if not worker.live:
                return "its agent is not connected"
            missing = sorted(set(wanted) - set(self.gpu_types))
            return (f"offers {', '.join(self.gpu_types) or 'no GPU'}; the claim accepts only "
                    f"{', '.join(wanted)} ({', '.join(missing)} missing)")
        if self.reason is Reason.WORKER_CORDONED:
            return "cordoned by an operator: nothing new is placed here"
        return ""


@dataclass(frozen=True, slots=True)
class Explanation:
    claim_id: str
    state: ClaimState
    reason: Reason
    checks: tuple[EntitlementCheck, ...]
    workers: tuple[WorkerExplanation, ...]
    queue_position: int  # 1-based among pending claims; 0 when not pending
    worker: str = ""                        # where an admitted claim sits
    devices: tuple[DeviceShare, ...] = ()
    gang_member: str = ""                   # the member whose checks are shown, for a pending gang
    gpu_types: tuple[str, ...] = ()         # the types the claim accepts
    bound: bool = False                     # RULES §10: its devices are its job's, bound from outside


def headline(claim: Claim, pending_reason: Reason = Reason.REASON_UNSPECIFIED) -> Reason:
    """The one headline reason of a claim, for its status and its explanation:
    a pending claim's is the reason it waits (`pending_reason`, as last
    decided), a refused claim's the refusal, and a claim that was admitted
    ADMISSIBLE; a pending claim withdrawn before admission has none."""
    if claim.state is ClaimState.PENDING:
        return pending_reason
    if claim.state is ClaimState.REFUSED:
        return claim.reason
    return Reason.ADMISSIBLE if claim.admitted_seq else Reason.REASON_UNSPECIFIED


def queue_position(state: ClusterState, claim: Claim) -> int:
    """1-based place in the pending queue (priority, then submission); 0 when not pending."""
    if claim.state is not ClaimState.PENDING:
        return 0
    return state.pending.index(pending_key(claim)) + 1


def worker_rows(state: ClusterState, claim: Claim) -> tuple[WorkerExplanation, ...]:
    """Every worker's verdict on the claim, in id order."""
    # one walk of each map into a dict, then every step per worker in C
    # (map, zip, tuple.__new__) but the verdict itself
    ids, by_id, loads = state.worker_ids, state.workers.to_dict(), state.loads.to_dict()
    capacities, worker_loads = list(map(by_id.__getitem__, ids)), list(map(loads.__getitem__, ids))
    whys = list(map(reasoner(claim.spec), capacities, worker_loads))
    oks = map(is_, whys, repeat(Reason.ADMISSIBLE))
    return tuple(map(tuple.__new__, repeat(WorkerExplanation),
                     zip(ids, oks, whys, capacities, worker_loads, repeat(claim.spec.resources))))


def _held_checks(state: ClusterState, claim: Claim) -> tuple[EntitlementCheck, ...]:
    """The checks an admitted (or once admitted) claim passed, with today's
    figures of its tenant (its own hold counted in them)."""
    spec, node = claim.spec, claim.tenant
    tenant, usage = state.tree.nodes[node], state.usage[node]
    gang = f"gang {spec.gang_id!r} admitted whole" if spec.gang_id else ""
    borrowed = claim.borrowed
    where = "placed on" if claim.state is ClaimState.ADMITTED else "was placed on"
    devices = ", ".join(f"{d.device_id} {d.mdev} mdev" for d in claim.devices)
    return (
        EntitlementCheck(CheckStep.VALIDATE, True, node=node, hold=claim.hold_uj, grade=claim.hold_grade),
        EntitlementCheck(CheckStep.GANG_COMPLETE, True, node=node, detail=gang),
        EntitlementCheck(CheckStep.DEVICES_ENTITLEMENT_CHECK, True, node=node, guarantee=tenant.guarantee_mdev,
                         usage=usage.devices.total, hold=spec.resources.gpu_mdev),
        EntitlementCheck(CheckStep.ENERGY_OWN_PASS_CHECK, not borrowed, node=node, guarantee=tenant.guarantee_uj,
                         usage=usage.energy.total, hold=claim.hold_uj, grade=claim.hold_grade,
                         detail=f"beyond its own guarantee: borrowed {claim.borrowed_uj} µJ" if borrowed
                         else "within its own guarantee",
                         reason=Reason.ENERGY_OWN_PASS if borrowed else Reason.REASON_UNSPECIFIED),
        EntitlementCheck(CheckStep.ESTIMATOR_GRADE_CHECK, True, node=node, hold=claim.hold_uj, grade=claim.hold_grade)
        if borrowed else EntitlementCheck(CheckStep.ESTIMATOR_GRADE_CHECK, False, evaluated=False),
        EntitlementCheck(CheckStep.ENERGY_SURPLUS_PASS_CHECK, True, node=node, hold=claim.hold_uj,
                         grade=claim.hold_grade, detail="borrowed from surplus")
        if borrowed else EntitlementCheck(CheckStep.ENERGY_SURPLUS_PASS_CHECK, False, evaluated=False),
        EntitlementCheck(CheckStep.PLACEMENT_CHECK, True, node=node,
                         detail=f"{where} {claim.worker!r}" + (f": {devices}" if devices else "")),
    )


def _settled(state: ClusterState, claim: Claim) -> Explanation:
    gpu_types = claim.spec.resources.gpu_types
    if claim.state is ClaimState.REFUSED:
        check = EntitlementCheck(CheckStep.GANG_COMPLETE, False, node=claim.tenant, reason=claim.reason,
                                 detail="the gang exceeds what the cluster can ever hold")
        return Explanation(claim.claim_id, claim.state, claim.reason, (check,), (), 0, gpu_types=gpu_types)
    if not claim.admitted_seq:   # a pending claim withdrawn: it never held anything
        return Explanation(claim.claim_id, claim.state, headline(claim), (), (), 0, gpu_types=gpu_types)
    workers: tuple[WorkerExplanation, ...] = ()
    if claim.state is ClaimState.ADMITTED:
        worker = state.workers[claim.worker]
        without = adjust(worker, state.loads[claim.worker], claim.claim_id, claim.spec, claim.devices, -1)
        workers = (WorkerExplanation(claim.worker, True, Reason.ADMISSIBLE, worker, without, claim.spec.resources),)
    return Explanation(claim.claim_id, claim.state, headline(claim), _held_checks(state, claim), workers, 0,
                       claim.worker, claim.devices, gpu_types=gpu_types, bound=claim.bound)


def explain(state: ClusterState, claim_id: str, now_ns: int = 0) -> Explanation | KernelError:
    claim = state.claims.get(claim_id)
    if claim is None:
        return KernelError(ErrorCode.UNKNOWN_CLAIM, "claim_id", f"no claim {claim_id!r}")
    if claim.state is not ClaimState.PENDING:
        return _settled(state, claim)
    gang_id = claim.spec.gang_id
    complete = not gang_id or gangs.complete(state, gang_id, claim.spec.gang_size)
    shown, judged_on, member = claim, state, ""
    if gang_id and complete:
        # the gang's own walk: the member that fails (or this one, if none does) on its scratch state
        for m, ev, scratch, _events in gangs.judged(state, gangs.members(state, gang_id), now_ns, record=True):
            if m.claim_id == claim_id or ev.reason is not Reason.ADMISSIBLE:
                shown, judged_on, mine = m, scratch, ev
                if ev.reason is not Reason.ADMISSIBLE:
                    break
        ev = mine
        member = shown.claim_id
    else:
        ev = evaluate(state, claim, now_ns, gang_ok=complete, may_preempt=not gang_id)
    return Explanation(claim_id, claim.state, ev.reason, ev.checks, worker_rows(judged_on, shown),
                       queue_position(state, claim), gang_member=member,
                       gpu_types=claim.spec.resources.gpu_types)
