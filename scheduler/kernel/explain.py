"""Explain (RULES §5): why a claim is where it is. For a pending claim, every
entitlement check of §3 with its figures, then every worker with ok, reason
and per-field figures; the headline is the first failing check. For an
admitted claim, the checks it passed (with today's figures) and where it sits.

One explanation never contradicts itself: a pending gang member shows the
checks and worker rows of the member that blocks its gang (judged, as the
decision judges it, on the state holding the members before it), so the
headline is always the failing check's reason.

The checks' words are written here from the facts `admission.evaluate`
returns (its Verdict's steps): evaluate decides, explain says why. (Over 300
lines on purpose: every word an explanation shows has this one home.)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import repeat
from typing import NamedTuple

from protos.energy import MDEV_PER_DEVICE, Grade

from . import gangs
from .admission import CHECKS, Verdict, evaluate
from .estimates import hold_for
from .entitlement import DEVICES, ENERGY, own_pass
from .fast.records import rows
from .limits import own_name
from .fast.shapes import pending_key
from .fit import Fit
from .loads import adjust
from .placement import reasoner
from .reasons import CheckStep, ClaimState, ErrorCode, KernelError, Reason
from .loads import WorkerLoad
from .snapshot import SCALAR_FIELDS, Claim, ClusterState, DeviceShare, Resources, Worker


@dataclass(frozen=True, slots=True)
class FieldFigure:
    field: str
    requested: int
    capacity: int
    reserved: int
    available_before: int
    available_after: int  # negative where it would not fit
    shortfall: int


def field_figures(worker: Worker, load: WorkerLoad, req: Resources) -> tuple[FieldFigure, ...]:
    """Per-field figures for an explanation, and `concurrency` last. On a
    worker that lacks a requested GPU type the GPU figures count all its
    devices: the type is the reason (the explanation says so), not a shortage."""
    capacity = worker.capacity
    if req.gpu_types and not set(req.gpu_types) <= set(capacity.gpu_types):
        req = replace(req, gpu_types=())
    figures = []
    for name in SCALAR_FIELDS:
        requested, cap = getattr(req, name), getattr(capacity, name)
        reserved = load.gpu_mdev if name == "gpu_mdev" else getattr(load, name)
        before = placeable_mdev(worker, load, req) if name == "gpu_mdev" else max(0, cap - reserved)
        figures.append(FieldFigure(name, requested, cap, reserved, before, before - requested,
                                   max(0, requested - before)))
    limit = worker.max_concurrency
    if limit:
        before = max(0, limit - len(load.active))
        figures.append(FieldFigure("concurrency", 1, limit, len(load.active), before, before - 1,
                                   max(0, 1 - before)))
    return tuple(figures)


def placeable_mdev(worker: Worker, load: WorkerLoad, req: Resources) -> int:
    """The GPU figure an explanation shows as available for this request: the
    most one device can give a fraction, or the wholly free devices."""
    used = load.device_used or (0,) * len(worker.devices)
    matching = _matching(worker, req)
    if 0 < req.gpu_mdev < MDEV_PER_DEVICE:
        return max((MDEV_PER_DEVICE - used[i] for i in matching), default=0)
    return MDEV_PER_DEVICE * sum(1 for i in matching if used[i] == 0)


def _matching(worker: Worker, req: Resources) -> list[int]:
    return [i for i, d in enumerate(worker.devices) if not req.gpu_types or d.device_type in req.gpu_types]


@dataclass(frozen=True, slots=True)
class EntitlementCheck:
    """One row of an explanation's checks: a step of RULES §3 with the
    figures behind it, in words."""

    step: CheckStep
    ok: bool
    evaluated: bool = True
    node: str = ""
    guarantee: int = 0
    usage: int = 0
    hold: int = 0
    surplus: int = 0
    limit: int | None = None
    grade: Grade | None = None
    detail: str = ""
    reason: Reason = Reason.REASON_UNSPECIFIED


_FAILS_WITH = dict(CHECKS)
_REACHED_PLACEMENT = (Reason.ADMISSIBLE, Reason.NO_ELIGIBLE_WORKER)


def _row(step: CheckStep, fit: Fit, hold: int, grade: Grade | None, detail: str,
         reason: Reason | None = None) -> EntitlementCheck:
    """A step's row from its Fit: failing, the step's own reason unless told."""
    if reason is None:
        reason = Reason.REASON_UNSPECIFIED if fit.ok else _FAILS_WITH[step]
    return EntitlementCheck(step, fit.ok, True, fit.node, fit.guarantee, fit.usage, hold, fit.allowance, fit.limit,
                            grade, detail, reason)


def check_rows(state: ClusterState, claim: Claim, verdict: Verdict, gang_ok: bool = True
               ) -> tuple[EntitlementCheck, ...]:
    """The rows of RULES §3's checks for a verdict on `state`: the steps it
    ran, in words, and the ones it never reached marked not evaluated (none
    for an admissible claim, whose rows end at placement)."""
    spec, tenant = claim.spec, claim.tenant
    hold = hold_for(state, spec)
    if isinstance(hold, KernelError):
        return _with_skipped([EntitlementCheck(CheckStep.VALIDATE, False, detail=str(hold), reason=Reason.INVALID)])
    hold_uj, grade = hold
    rows = [EntitlementCheck(CheckStep.VALIDATE, True, node=tenant, hold=hold_uj, grade=grade),
            EntitlementCheck(CheckStep.GANG_COMPLETE, gang_ok, node=tenant,
                             reason=Reason.REASON_UNSPECIFIED if gang_ok else Reason.GANG_INCOMPLETE,
                             detail="" if gang_ok else
                             f"gang {own_name(spec.gang_id, spec.tenant)!r} waits for its members")]
    if not gang_ok:
        return _with_skipped(rows)
    steps, mdev = verdict.steps, spec.resources.gpu_mdev
    if not steps and verdict.reason in _REACHED_PLACEMENT:
        # within every guarantee (admission's shortcut): the own passes, which all pass
        steps = ((CheckStep.DEVICES_ENTITLEMENT_CHECK, own_pass(state.tree, state.usage, tenant, DEVICES, mdev)),
                 (CheckStep.ENERGY_OWN_PASS_CHECK, own_pass(state.tree, state.usage, tenant, ENERGY, hold_uj)))
    own_devices = None
    for step, fit in steps:
        if step is CheckStep.DEVICES_ENTITLEMENT_CHECK:
            if own_devices is None:
                own_devices = fit
            else:
                rows.pop()  # borrowing devices: the allowances decided, not the own pass
            rows.append(_row(step, fit, mdev, None, "milli-devices within guarantee" if own_devices.ok
                             else "milli-devices beyond guarantee: borrowed"))
        elif step is CheckStep.ENERGY_OWN_PASS_CHECK:
            if verdict.reason is Reason.ENERGY_OWN_PASS:
                rows.append(_row(step, fit._replace(ok=False), hold_uj, grade,
                                 "its guarantee is in use by claims that may not be preempted for it"))
            else:
                rows.append(_row(step, fit, hold_uj, grade, "within its own guarantee" if fit.ok
                                 else f"above the guarantee of {fit.node!r}: it must borrow", Reason.REASON_UNSPECIFIED))
        elif step is CheckStep.ESTIMATOR_GRADE_CHECK:
            rows.append(EntitlementCheck(step, fit.ok, node=tenant, hold=hold_uj, grade=grade,
                                         reason=Reason.REASON_UNSPECIFIED if fit.ok else _FAILS_WITH[step],
                                         detail="" if fit.ok else "an Estimator estimate may not borrow"))
        else:
            rows.append(_row(step, fit, hold_uj, grade, "borrowed from surplus" if fit.ok
                             else f"beyond what {fit.node!r} may borrow"))
    last = rows[-1]
    if not last.ok and last.reason and last.reason is not verdict.reason:
        # it would have had to borrow, but preempting lower-priority claims of its
        # tenant made room in its own guarantee: the failed step is not the reason
        rows[-1] = replace(last, reason=Reason.REASON_UNSPECIFIED,
                           detail=f"{last.detail}; lower-priority claims of its tenant are "
                                  "preempted to fit its own guarantee instead")
    if verdict.reason not in _REACHED_PLACEMENT:
        return _with_skipped(rows)
    placed = verdict.reason is Reason.ADMISSIBLE
    rows.append(EntitlementCheck(CheckStep.PLACEMENT_CHECK, placed, node=tenant,
                                 reason=Reason.REASON_UNSPECIFIED if placed else Reason.NO_ELIGIBLE_WORKER,
                                 detail=f"placed on {verdict.worker!r}" if placed else "no worker can take it"))
    return tuple(rows) if placed else _with_skipped(rows)


def _with_skipped(rows: list[EntitlementCheck]) -> tuple[EntitlementCheck, ...]:
    """The rows, then every step not reached, in RULES §3's order, as not evaluated."""
    done = {row.step for row in rows}
    return (*rows, *(EntitlementCheck(step, False, evaluated=False) for step, _ in CHECKS if step not in done))


class WorkerExplanation(NamedTuple):
    """One worker's verdict."""

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
    workers_omitted: int = 0                # worker rows left out (explain's `max_workers`)


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


def worker_rows(state: ClusterState, claim: Claim, max_workers: int | None = None) -> tuple[WorkerExplanation, ...]:
    """Every worker's verdict on the claim, in id order (the first
    `max_workers` only, when given)."""
    if max_workers is None:   # every worker: one walk of each map, then lookups
        ids, by_id, loads = state.worker_ids, state.workers.to_dict(), state.loads.to_dict()
    else:
        ids, by_id, loads = state.worker_ids[:max_workers], state.workers, state.loads
    capacities, worker_loads = [by_id[w] for w in ids], [loads[w] for w in ids]
    whys = list(map(reasoner(claim.spec), capacities, worker_loads))
    oks = [why is Reason.ADMISSIBLE for why in whys]
    return rows(WorkerExplanation, ids, oks, whys, capacities, worker_loads, repeat(claim.spec.resources))


def _held_checks(state: ClusterState, claim: Claim) -> tuple[EntitlementCheck, ...]:
    """The checks an admitted (or once admitted) claim passed, with today's
    figures of its tenant (its own hold counted in them)."""
    spec, node = claim.spec, claim.tenant
    tenant, usage = state.tree.nodes[node], state.usage[node]
    gang = f"gang {own_name(spec.gang_id, spec.tenant)!r} admitted whole" if spec.gang_id else ""
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


def _not_pending(state: ClusterState, claim: Claim) -> Explanation:
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


def explain(state: ClusterState, claim_id: str, now_ns: int = 0, max_workers: int | None = None
            ) -> Explanation | KernelError:
    """Why a claim is where it is; a pending one's verdict on every worker, or
    on the first `max_workers` in id order (the rest counted, not judged: a
    Plan explains up to 1,000 claims, and 10,000 workers each made every
    Plan ten million verdicts)."""
    claim = state.claims.get(claim_id)
    if claim is None:
        return KernelError(ErrorCode.UNKNOWN_CLAIM, "claim_id", f"no claim {claim_id!r}")
    if claim.state is not ClaimState.PENDING:
        return _not_pending(state, claim)
    gang_id = claim.spec.gang_id
    complete = not gang_id or gangs.complete(state, gang_id, claim.spec.gang_size)
    shown, judged_on, member = claim, state, ""
    if gang_id and complete:
        # the gang's own walk: the member that fails (or this one, if none does) on its scratch state
        for m, ev, scratch, _events in gangs.judged(state, gangs.members(state, gang_id), now_ns):
            if m.claim_id == claim_id or ev.reason is not Reason.ADMISSIBLE:
                shown, judged_on, mine = m, scratch, ev
                if ev.reason is not Reason.ADMISSIBLE:
                    break
        ev = mine
        member = shown.claim_id
    else:
        ev = evaluate(state, claim, now_ns, gang_ok=complete, may_preempt=not gang_id)
    checks = check_rows(judged_on, shown, ev, complete)
    rows = worker_rows(judged_on, shown, max_workers)
    return Explanation(claim_id, claim.state, ev.reason, checks, rows,
                       queue_position(state, claim), gang_member=member,
                       gpu_types=claim.spec.resources.gpu_types, workers_omitted=len(state.worker_ids) - len(rows))
