"""The preemption query of the operations API: the order in which admitted
claims would be preempted, and, for one pending claim, the victims its
admission would take (the fewest, in order, that suffice)."""

from __future__ import annotations

from dataclasses import dataclass

from .admission import evaluate
from .preemption import ordered, admitted_claims, priority_candidates, reclaim_candidates, tier
from .reasons import ClaimState, ErrorCode, KernelError, Reason, Tier
from .snapshot import Claim, ClusterState


@dataclass(frozen=True, slots=True)
class Victim:
    claim_id: str
    tenant: str
    tier: Tier
    measured_uj: int
    completed_units: int
    priority: int
    admitted_seq: int


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    order: tuple[Victim, ...]    # worst first
    victims: tuple[str, ...]     # for a claim: what its admission takes now
    reason: Reason               # for a claim: its verdict's reason


def _victim(c: Claim) -> Victim:
    return Victim(c.claim_id, c.tenant, tier(c), c.measured_uj, c.completed_units, c.spec.priority, c.admitted_seq)


def preemption_order(state: ClusterState, for_claim_id: str | None = None, now_ns: int = 0) -> PreemptionPlan | KernelError:
    if for_claim_id is None:
        return PreemptionPlan(tuple(_victim(c) for c in ordered(admitted_claims(state))), (), Reason.REASON_UNSPECIFIED)
    claim = state.claims.get(for_claim_id)
    if claim is None:
        return KernelError(ErrorCode.UNKNOWN_CLAIM, "for_claim_id", f"no claim {for_claim_id!r}")
    if claim.state is not ClaimState.PENDING:
        return PreemptionPlan((), (), Reason.REASON_UNSPECIFIED)
    candidates = {c.claim_id: c for c in (*reclaim_candidates(state, claim), *priority_candidates(state, claim))}
    ev = evaluate(state, claim, now_ns, may_preempt=not claim.spec.gang_id)
    return PreemptionPlan(tuple(_victim(c) for c in ordered(candidates.values())),
                          tuple(v.claim_id for v in ev.victims), ev.reason)
