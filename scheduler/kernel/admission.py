"""Admission (RULES §3): one pending claim judged against one state.

The checks, in RULES §3's order; the first failure is the claim's reason
(`CHECKS`, the order and each check's reason as data, read by `evaluate`'s
callers and by explain):

    validate → gang complete → devices entitlement → energy own pass →
    (needs to borrow) not Estimator → energy surplus pass → placement

`evaluate` returns the facts (a `Verdict`): the reason, what admitting takes
(hold, victims, worker, devices) and the entitlement steps it ran, each with
the `Fit` it computed. explain.py writes the words from them. A claim whose
hold fits every guarantee on its path passes every entitlement check at
once (`within_guarantees`): its steps are left empty and explain computes
them when asked.
"""

from __future__ import annotations

from typing import NamedTuple

from protos.energy import Grade

from .entitlement import DEVICES, ENERGY, own_pass, within_allowance, within_guarantees
from .estimates import hold_for
from .events import ClaimAdmitted, Preempted
from .fit import Fit
from .placement import place
from .preemption import Victims, outranked_victims, reclaim_victims
from .reasons import CheckStep, KernelError, Reason
from .requests import settle
from .snapshot import Claim, ClaimSpec, ClusterState, DeviceShare
from .transitions import apply
from .fast.members import ADMISSIBLE, ESTIMATOR

# RULES §3's checks in order, each with the reason a claim waits for when it
# fails (a failed own pass is not a reason by itself: the claim goes on to
# borrow; ENERGY_OWN_PASS is for one within its own guarantee that cannot
# take back what was lent)
CHECKS: tuple[tuple[CheckStep, Reason], ...] = (
    (CheckStep.VALIDATE, Reason.INVALID),
    (CheckStep.GANG_COMPLETE, Reason.GANG_INCOMPLETE),
    (CheckStep.DEVICES_ENTITLEMENT_CHECK, Reason.DEVICES_ENTITLEMENT),
    (CheckStep.ENERGY_OWN_PASS_CHECK, Reason.ENERGY_OWN_PASS),
    (CheckStep.ESTIMATOR_GRADE_CHECK, Reason.ESTIMATOR_MAY_NOT_BORROW),
    (CheckStep.ENERGY_SURPLUS_PASS_CHECK, Reason.ENERGY_SURPLUS),
    (CheckStep.PLACEMENT_CHECK, Reason.NO_ELIGIBLE_WORKER),
)

Step = tuple[CheckStep, Fit]


class Verdict(NamedTuple):
    """One claim judged against one state: the reason (ADMISSIBLE when it
    would be admitted), the hold, the entitlement steps run, in order, and
    what admitting it takes. The devices step appears twice when the claim borrows
    devices: its own pass, then the allowances that admitted it."""

    reason: Reason
    hold_uj: int = 0
    hold_grade: Grade | None = None
    steps: tuple[Step, ...] = ()
    borrowed: bool = False
    victims: tuple[Claim, ...] = ()
    worker: str = ""
    devices: tuple[DeviceShare, ...] = ()


def evaluate(state: ClusterState, claim: Claim, now_ns: int = 0, *, gang_ok: bool = True,
             may_preempt: bool = True) -> Verdict:
    """Judge one pending claim. `gang_ok` is the gang step's verdict, decided
    by the caller; gangs do not preempt (may_preempt=False)."""
    spec, tree, usage = claim.spec, state.tree, state.usage
    hold = hold_for(state, spec)   # the validate step
    if isinstance(hold, KernelError):
        return Verdict(Reason.INVALID)
    hold_uj, grade = hold
    if not gang_ok:
        return Verdict(Reason.GANG_INCOMPLETE, hold_uj, grade)
    tenant, mdev = spec.tenant, spec.resources.gpu_mdev
    if within_guarantees(tree, usage, tenant, hold_uj, mdev):
        # every node on the path stays within its guarantee counting all its subtree
        # uses: every entitlement check passes, nothing is borrowed, nobody preempted
        return _placed(state, spec, hold_uj, grade, False, None, ())

    own_d = own_pass(tree, usage, tenant, DEVICES, mdev)
    if own_d.ok:
        steps: tuple[Step, ...] = ((CheckStep.DEVICES_ENTITLEMENT_CHECK, own_d),)
    else:
        dev = within_allowance(tree, usage, tenant, DEVICES, mdev, True)
        steps = ((CheckStep.DEVICES_ENTITLEMENT_CHECK, own_d), (CheckStep.DEVICES_ENTITLEMENT_CHECK, dev))
        if not dev.ok:
            return Verdict(Reason.DEVICES_ENTITLEMENT, hold_uj, grade, steps)

    own_e = own_pass(tree, usage, tenant, ENERGY, hold_uj)
    steps += ((CheckStep.ENERGY_OWN_PASS_CHECK, own_e),)
    if own_e.ok and own_d.ok:
        # within its own guarantee: what its tenant lent is taken back (RULES §6 (a))
        victims = reclaim_victims(state, claim, hold_uj, now_ns, may_preempt)
        if victims is None:
            return Verdict(Reason.ENERGY_OWN_PASS, hold_uj, grade, steps)
        return _placed(state, spec, hold_uj, grade, False, victims, steps)

    # beyond it: the claim borrows, which an Estimator hold may not
    estimator = Fit(grade is not ESTIMATOR, tenant, 0, 0)
    steps += ((CheckStep.ESTIMATOR_GRADE_CHECK, estimator),)
    failure = Reason.ESTIMATOR_MAY_NOT_BORROW
    if estimator.ok:
        surplus = within_allowance(tree, usage, tenant, ENERGY, hold_uj, True)
        steps += ((CheckStep.ENERGY_SURPLUS_PASS_CHECK, surplus),)
        if surplus.ok:
            return _placed(state, spec, hold_uj, grade, True, None, steps)
        failure = Reason.ENERGY_SURPLUS
    # lower-priority claims of its own tenant may be preempted to make the own pass fit (RULES §6 (b))
    victims = outranked_victims(state, claim, hold_uj, now_ns) if may_preempt else None
    if victims is None:
        return Verdict(failure, hold_uj, grade, steps)
    return _placed(state, spec, hold_uj, grade, False, victims, steps)


def _placed(state: ClusterState, spec: ClaimSpec, hold_uj: int, grade: Grade, borrowed: bool,
            victims: Victims | None, steps: tuple[Step, ...]) -> Verdict:
    """The last step: a worker for the claim, in the state its victims (if
    any) leave."""
    target = victims.state if victims else state
    placed = place(target.workers, target.loads, target.free_index, spec)
    if placed is None:
        return Verdict(Reason.NO_ELIGIBLE_WORKER, hold_uj, grade, steps)
    return Verdict(ADMISSIBLE, hold_uj, grade, steps, borrowed, victims.claims if victims else (),
                   placed[0], placed[1])


def admit_events(state: ClusterState, claim: Claim, verdict: Verdict, now_ns: int) -> list:
    """The events that carry out an ADMISSIBLE verdict: preemptions first."""
    events, scratch = [], state
    for victim in verdict.victims:
        event = settle(scratch, victim.claim_id, now_ns, Preempted, by_claim=claim.claim_id)
        events.append(event)
        scratch = apply(scratch, event)
    events.append(ClaimAdmitted(claim.claim_id, verdict.hold_uj, verdict.hold_grade, verdict.worker, verdict.devices,
                                verdict.borrowed, scratch.next_admit_seq, now_ns, borrowed_uj(scratch, claim, verdict)))
    return events


def borrowed_uj(state: ClusterState, claim: Claim, verdict: Verdict) -> int:
    """What a surplus-pass admission borrows: the part of its hold beyond
    what its tenant's own guarantee has free (0 in the own pass)."""
    if not verdict.borrowed:
        return 0
    free = max(0, state.tree.nodes[claim.tenant].guarantee_uj - state.usage[claim.tenant].energy.total)
    return max(0, verdict.hold_uj - free)
