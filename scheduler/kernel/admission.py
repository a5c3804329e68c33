"""Admission (RULES §3): validate a submission, then decide pending claims.

Check order for one claim, the first failure is its reason: validate → gang
complete → devices entitlement → energy own pass → (needs to borrow) not
Estimator → energy surplus pass → placement on workers. Each step records an
EntitlementCheck with the figures behind it, which is what explain shows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from protos.energy import MDEV_PER_DEVICE, Grade

from .entitlement import DEVICES, ENERGY, own_pass, within_allowance, within_guarantees
from .estimates import Estimate, usable_estimate
from .events import ClaimAdmitted, ClaimSubmitted, Preempted, Progress, Released
from .fit import Fit
from .limits import MAX_GANG_SIZE, MAX_GPU_TYPE_CHARS, MAX_GPU_TYPES, name_error, never_fits
from .placement import place
from .preemption import Blocker, Victims, choose, priority_candidates, reclaim_candidates
from .reasons import CheckStep, ClaimState, ErrorCode, KernelError, Reason
from .snapshot import Claim, ClaimSpec, ClusterState, DeviceShare
from .transitions import apply

INT32 = range(-(2 ** 31), 2 ** 31)


# members read on every decision, bound once (reasons.py says why)
_ADMISSIBLE, _NONE, _ESTIMATOR = Reason.ADMISSIBLE, Reason.REASON_UNSPECIFIED, Grade.Estimator


@dataclass(frozen=True, slots=True)
class EntitlementCheck:
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


def _invalid(field: str, message: str) -> KernelError:
    return KernelError(ErrorCode.INVALID_CLAIM, field, message)


def _spec_error(spec: ClaimSpec) -> KernelError | None:
    req = spec.resources
    for field, value in (("claim_id", spec.claim_id), ("gang_id", spec.gang_id), ("work_class", spec.work_class)):
        problem = name_error(value) if value or field == "claim_id" else None
        if problem:
            return _invalid(field, f"{field} {problem}")
    for name in ("cpu_millis", "memory_mb", "disk_mb", "gpu_mdev"):
        if getattr(req, name) < 0:
            return _invalid(f"resources.{name}", f"{name} must not be negative")
    if req.gpu_mdev >= MDEV_PER_DEVICE and req.gpu_mdev % MDEV_PER_DEVICE:
        return _invalid("resources.gpu_mdev", f"{req.gpu_mdev} mdev: at or above 1000 it must be whole GPUs")
    if req.gpu_types and not req.gpu_mdev:
        return _invalid("resources.gpu_types", "gpu_types needs a positive gpu_mdev")
    if list(req.gpu_types) != sorted(set(req.gpu_types)) or "" in req.gpu_types:
        return _invalid("resources.gpu_types", "gpu_types must be distinct non-empty names, sorted")
    if len(req.gpu_types) > MAX_GPU_TYPES or any(len(t) > MAX_GPU_TYPE_CHARS for t in req.gpu_types):
        return _invalid("resources.gpu_types",
                        f"at most {MAX_GPU_TYPES} gpu_types of at most {MAX_GPU_TYPE_CHARS} characters each")
    if spec.estimate_uj is None and not spec.work_class:
        return _invalid("estimate_uj", "a claim needs estimate_uj, work_class or both")
    if spec.estimate_uj is not None and spec.estimate_uj <= 0:
        return _invalid("estimate_uj", "estimate_uj must be positive: a claim that holds nothing is not admitted")
    if spec.priority not in INT32:
        return _invalid("priority", "priority must fit in 32 bits")
    if spec.gang_id and not 1 <= spec.gang_size <= MAX_GANG_SIZE:
        return _invalid("gang_size", f"a gang member needs 1 <= gang_size <= {MAX_GANG_SIZE}")
    if not spec.gang_id and spec.gang_size:
        return _invalid("gang_id", "gang_size without gang_id")
    return None


def hold_for(state: ClusterState, spec: ClaimSpec) -> tuple[int, Grade] | KernelError:
    """The hold: the larger of the declared estimate (Estimator) and the work
    class's derived estimate (ModelBased); on a tie the better grade. A class
    still without enough history is refused unless the claim declares its own
    estimate too (that is how a class earns its first observations)."""
    if not spec.work_class and spec.estimate_uj is not None:
        return spec.estimate_uj, _ESTIMATOR  # the usual claim, judged on every decision: no class to weigh
    figures = []
    if spec.work_class:
        estimate = usable_estimate(state, spec.work_class)
        if isinstance(estimate, Estimate):
            figures.append((estimate.estimate_uj, -Grade.ModelBased))
        elif spec.estimate_uj is None or estimate.code is not ErrorCode.EMPTY_WORK_CLASS:
            return estimate
    if spec.estimate_uj is not None:
        figures.append((spec.estimate_uj, -Grade.Estimator))
    uj, grade = max(figures)
    return uj, Grade(-grade)


def submit(state: ClusterState, spec: ClaimSpec, now_ns: int = 0) -> ClaimSubmitted | Claim | KernelError:
    """The event that queues a claim at `now_ns`; the existing Claim for an
    identical resubmission; or why it is refused."""
    error = _spec_error(spec)
    if error:
        return error
    existing = state.claims.get(spec.claim_id)
    if existing is not None:
        if existing.spec == spec:
            return existing
        return KernelError(ErrorCode.DUPLICATE_CLAIM, "claim_id", f"claim {spec.claim_id!r} exists with another request")
    if state.tree is None or spec.tenant not in state.tree.nodes:
        return KernelError(ErrorCode.UNKNOWN_TENANT, "tenant", f"tenant {spec.tenant!r} is not in the tree")
    hold = hold_for(state, spec)
    if isinstance(hold, KernelError):
        return hold
    never = never_fits(state, spec, hold[0])
    if never:
        return KernelError(ErrorCode.CLAIM_NEVER_FITS, never[0], never[1])
    if spec.gang_id:
        error = _gang_error(state, spec)
        if error:
            return error
    return ClaimSubmitted(spec, state.next_seq, now_ns)


def _gang_error(state: ClusterState, spec: ClaimSpec) -> KernelError | None:
    """A member joins a gang still waiting, of its own tenant and size; a gang
    id with admitted members still open cannot start a new gang."""
    members = [state.claims[m] for m in state.gangs.get(spec.gang_id, ())]
    if any(m.spec.gang_size != spec.gang_size for m in members):
        return _invalid("gang_size", f"gang {spec.gang_id!r} was declared with another size")
    if any(m.tenant != spec.tenant for m in members):
        return _invalid("gang_id", f"gang {spec.gang_id!r} belongs to another tenant; a gang's members share one")
    if len(members) >= spec.gang_size:
        return _invalid("gang_id", f"gang {spec.gang_id!r} already has its {spec.gang_size} members")
    if not members and any(state.claims[c].spec.gang_id == spec.gang_id
                           for ids in state.open_by_tenant.values() for c in ids):
        return _invalid("gang_id", f"gang {spec.gang_id!r} was admitted and has open members; "
                                   "a gang id is reused only once all its members are settled")
    return None


def progress(state: ClusterState, claim_id: str, completed_units: int) -> Progress | None | KernelError:
    """The event that records a claim's cumulative completed units; None when
    it already has that count (nothing to record: a report sent again, after
    an answer that was lost, changes nothing); or why not."""
    claim = state.claims.get(claim_id)
    if claim is None:
        return KernelError(ErrorCode.UNKNOWN_CLAIM, "claim_id", f"no claim {claim_id!r}")
    if claim.state not in (ClaimState.PENDING, ClaimState.ADMITTED):
        return KernelError(ErrorCode.CLAIM_NOT_OPEN, "claim_id", f"claim {claim_id!r} is {claim.state.name}")
    if completed_units < claim.completed_units:
        return KernelError(ErrorCode.PROGRESS_REGRESSED, "completed_units",
                           f"completed units are cumulative: {completed_units} < {claim.completed_units}")
    if completed_units == claim.completed_units:
        return None
    return Progress(claim_id, completed_units)


def settle(state: ClusterState, claim_id: str, now_ns: int, kind: type = Released, **extra) -> Released | KernelError:
    """Released (or Preempted/Reclaimed) with the claim's actual: its
    measured shares, graded by the worst; the hold when nothing was measured."""
    claim = state.claims.get(claim_id)
    if claim is None:
        return KernelError(ErrorCode.UNKNOWN_CLAIM, "claim_id", f"no claim {claim_id!r}")
    if claim.state not in (ClaimState.PENDING, ClaimState.ADMITTED) or (
            kind is not Released and claim.state is not ClaimState.ADMITTED):
        return KernelError(ErrorCode.CLAIM_NOT_OPEN, "claim_id", f"claim {claim_id!r} is {claim.state.name}")
    actual_uj, grade = claim.actual
    return kind(claim_id, actual_uj, grade, claim.completed_units, now_ns, **extra)


def release(state: ClusterState, claim_id: str, now_ns: int) -> Released | KernelError:
    return settle(state, claim_id, now_ns)


class Evaluation(NamedTuple):
    """One claim judged against one state: the reason (ADMISSIBLE when it
    would be admitted), the checks behind it, and what admitting it takes.
    A NamedTuple: one is made per pending claim in every pass."""

    reason: Reason
    checks: tuple[EntitlementCheck, ...] = ()
    hold_uj: int = 0
    hold_grade: Grade | None = None
    borrowed: bool = False
    victims: tuple[Claim, ...] = ()
    worker: str = ""
    devices: tuple[DeviceShare, ...] = ()


def _check(step: CheckStep, fit: Fit, hold: int, grade: Grade | None, reason: Reason, detail: str) -> EntitlementCheck:
    return EntitlementCheck(step, fit.ok, True, fit.node, fit.guarantee, fit.usage, hold, fit.allowance, fit.limit,
                            grade, detail, Reason.REASON_UNSPECIFIED if fit.ok else reason)


def _devices_check(own: Fit, fit: Fit, mdev: int) -> EntitlementCheck:
    """The devices step: `own` the own pass, `fit` what decided it (the own
    pass, or the allowances when the claim borrows devices)."""
    return _check(CheckStep.DEVICES_ENTITLEMENT_CHECK, fit, mdev, None, Reason.DEVICES_ENTITLEMENT,
                  "milli-devices within guarantee" if own.ok else "milli-devices beyond guarantee: borrowed")


def _own_energy_check(own: Fit, hold: int, grade: Grade) -> EntitlementCheck:
    # failing here is not the claim's reason: it goes on to borrow (ENERGY_OWN_PASS
    # is for a claim within its own guarantee that cannot take back what is lent)
    return _check(CheckStep.ENERGY_OWN_PASS_CHECK, own, hold, grade, Reason.REASON_UNSPECIFIED,
                  "within its own guarantee" if own.ok else f"above the guarantee of {own.node!r}: it must borrow")


def _skipped(steps_done: list[EntitlementCheck]) -> tuple[EntitlementCheck, ...]:
    if not steps_done:
        return ()
    done = {c.step for c in steps_done}
    rest = [EntitlementCheck(step, False, evaluated=False) for step in CheckStep
            if step is not CheckStep.CHECK_STEP_UNSPECIFIED and step not in done]
    return (*steps_done, *rest)


def _own_fits(claim: Claim, hold: int):
    """What still blocks an own-pass admission, or None: (check, dimension,
    node, the usage that check compared), checked lazily in order."""
    mdev = claim.spec.resources.gpu_mdev

    def blocking(state: ClusterState) -> Blocker | None:
        tree, usage, tenant = state.tree, state.usage, claim.tenant
        for check in (own_pass, within_allowance):
            for dim, amount in ((ENERGY, hold), (DEVICES, mdev)):
                fit = own_pass(tree, usage, tenant, dim, amount) if check is own_pass else within_allowance(
                    tree, usage, tenant, dim, amount, False)
                if not fit.ok:
                    return Blocker(check.__name__, dim, fit.node, fit.usage)
        return None
    return blocking


def _preempter(claim: Claim, now_ns: int):
    def remove(state: ClusterState, victim: Claim) -> ClusterState:
        return apply(state, settle(state, victim.claim_id, now_ns, Preempted, by_claim=claim.claim_id))
    return remove


def evaluate(state: ClusterState, claim: Claim, now_ns: int = 0, *, gang_ok: bool = True,
             may_preempt: bool = True, record: bool = True) -> Evaluation:
    """Judge one pending claim. `gang_ok` is the gang step's verdict, decided
    by the caller; gangs do not preempt (may_preempt=False). Without
    `record` the checks are not built (a decision needs only the outcome,
    and this runs for every pending claim in every pass)."""
    spec, tree, usage = claim.spec, state.tree, state.usage
    checks: list[EntitlementCheck] = []
    hold = hold_for(state, spec) if spec.tenant in tree.nodes else KernelError(
        ErrorCode.UNKNOWN_TENANT, "tenant", f"tenant {spec.tenant!r} is not in the tree")
    if isinstance(hold, KernelError):
        if record:
            checks.append(EntitlementCheck(CheckStep.VALIDATE, False, detail=str(hold), reason=Reason.INVALID))
        return Evaluation(Reason.INVALID, _skipped(checks))
    hold_uj, grade = hold
    if record:
        checks += (EntitlementCheck(CheckStep.VALIDATE, True, node=spec.tenant, hold=hold_uj, grade=grade),
                   EntitlementCheck(CheckStep.GANG_COMPLETE, gang_ok, node=spec.tenant,
                                    reason=Reason.REASON_UNSPECIFIED if gang_ok else Reason.GANG_INCOMPLETE,
                                    detail="" if gang_ok else f"gang {spec.gang_id!r} waits for its members"))
    if not gang_ok:
        return Evaluation(Reason.GANG_INCOMPLETE, _skipped(checks), hold_uj, grade)

    mdev = spec.resources.gpu_mdev
    if within_guarantees(tree, usage, spec.tenant, hold_uj, mdev):
        # every node on the path stays within its guarantee counting all its subtree
        # uses: every entitlement check passes, nothing is borrowed, nobody preempted
        if record:
            own_d = own_pass(tree, usage, spec.tenant, DEVICES, mdev)
            checks += (_devices_check(own_d, own_d, mdev),
                       _own_energy_check(own_pass(tree, usage, spec.tenant, ENERGY, hold_uj), hold_uj, grade))
        return _placement(state, spec, hold_uj, grade, False, None, checks if record else None)
    own_d = own_pass(tree, usage, spec.tenant, DEVICES, mdev)
    dev = own_d if own_d.ok else within_allowance(tree, usage, spec.tenant, DEVICES, mdev, True)
    if record:
        checks.append(_devices_check(own_d, dev, mdev))
    if not dev.ok:
        return Evaluation(Reason.DEVICES_ENTITLEMENT, _skipped(checks), hold_uj, grade)

    own_e = own_pass(tree, usage, spec.tenant, ENERGY, hold_uj)
    if record:
        checks.append(_own_energy_check(own_e, hold_uj, grade))
    borrowing = not (own_e.ok and own_d.ok)
    victims: Victims | None = None
    if not borrowing:
        blocking = _own_fits(claim, hold_uj)
        victims = choose(state, lambda: reclaim_candidates(state, claim) if may_preempt else [],
                         blocking, _preempter(claim, now_ns), blocking(state))
        if victims is None:
            if record:
                checks[-1] = EntitlementCheck(CheckStep.ENERGY_OWN_PASS_CHECK, False, True, own_e.node,
                                              own_e.guarantee, own_e.usage, hold_uj, 0, None, grade,
                                              "its guarantee is in use by claims that may not be preempted for it",
                                              Reason.ENERGY_OWN_PASS)
            return Evaluation(Reason.ENERGY_OWN_PASS, _skipped(checks), hold_uj, grade)
    else:
        estimator = grade is _ESTIMATOR
        if record:
            checks.append(EntitlementCheck(
                CheckStep.ESTIMATOR_GRADE_CHECK, not estimator, node=spec.tenant, hold=hold_uj, grade=grade,
                reason=Reason.ESTIMATOR_MAY_NOT_BORROW if estimator else Reason.REASON_UNSPECIFIED,
                detail="an Estimator estimate may not borrow" if estimator else ""))
        failure = Reason.ESTIMATOR_MAY_NOT_BORROW
        if not estimator:
            surplus = within_allowance(tree, usage, spec.tenant, ENERGY, hold_uj, True)
            if record:
                checks.append(_check(CheckStep.ENERGY_SURPLUS_PASS_CHECK, surplus, hold_uj, grade,
                                     Reason.ENERGY_SURPLUS, "borrowed from surplus" if surplus.ok
                                     else f"beyond what {surplus.node!r} may borrow"))
            failure = Reason.REASON_UNSPECIFIED if surplus.ok else Reason.ENERGY_SURPLUS
        if failure is not _NONE:
            # outranking claims of its own tenant may be preempted to make the own pass fit
            candidates = priority_candidates(state, claim) if may_preempt else []
            if not candidates:
                return Evaluation(failure, _skipped(checks), hold_uj, grade)
            blocking = _own_fits(claim, hold_uj)
            victims = choose(state, lambda: candidates, blocking, _preempter(claim, now_ns), blocking(state))
            if victims is None:
                return Evaluation(failure, _skipped(checks), hold_uj, grade)
            borrowing = False
            if record:  # the check still failed, but preempting made room: it is not the reason
                checks[-1] = replace(checks[-1], reason=Reason.REASON_UNSPECIFIED,
                                     detail=f"{checks[-1].detail}; lower-priority claims of its tenant are "
                                            "preempted to fit its own guarantee instead")
    return _placement(state, spec, hold_uj, grade, borrowing, victims, checks if record else None)


def _placement(state: ClusterState, spec: ClaimSpec, hold_uj: int, grade: Grade, borrowing: bool,
               victims: Victims | None, checks: list[EntitlementCheck] | None) -> Evaluation:
    """The last step: a worker for the claim, in the state its victims (if
    any) leave; `checks` is None when they are not recorded."""
    target = victims.state if victims else state
    placed = place(target.workers, target.loads, target.free_index, spec)
    if checks is not None:
        checks.append(EntitlementCheck(CheckStep.PLACEMENT_CHECK, placed is not None, node=spec.tenant,
                                       reason=Reason.REASON_UNSPECIFIED if placed else Reason.NO_ELIGIBLE_WORKER,
                                       detail=f"placed on {placed[0]!r}" if placed else "no worker can take it"))
    if placed is None:
        return Evaluation(Reason.NO_ELIGIBLE_WORKER, _skipped(checks or []), hold_uj, grade)
    return Evaluation(_ADMISSIBLE, tuple(checks or ()), hold_uj, grade, borrowing,
                      victims.claims if victims else (), placed[0], placed[1])


def admit_events(state: ClusterState, claim: Claim, ev: Evaluation, now_ns: int) -> list:
    """The events that carry out an ADMISSIBLE evaluation: preemptions first."""
    events, scratch = [], state
    for victim in ev.victims:
        event = settle(scratch, victim.claim_id, now_ns, Preempted, by_claim=claim.claim_id)
        events.append(event)
        scratch = apply(scratch, event)
    events.append(ClaimAdmitted(claim.claim_id, ev.hold_uj, ev.hold_grade, ev.worker, ev.devices, ev.borrowed,
                                scratch.next_admit_seq, now_ns, borrowed_uj(scratch, claim, ev)))
    return events


def borrowed_uj(state: ClusterState, claim: Claim, ev: Evaluation) -> int:
    """What a surplus-pass admission borrows: the part of its hold beyond
    what its tenant's own guarantee has free (0 in the own pass)."""
    if not ev.borrowed:
        return 0
    free = max(0, state.tree.nodes[claim.tenant].guarantee_uj - state.usage[claim.tenant].energy.total)
    return max(0, ev.hold_uj - free)
