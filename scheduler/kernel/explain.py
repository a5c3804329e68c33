"""Explain (RULES §5): why a claim is where it is. For a pending claim, every
entitlement check of §3 with its figures, then every worker with ok, reason
and per-field figures; the headline is the first failing check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from . import gangs
from .admission import EntitlementCheck, evaluate
from .placement import FieldFigure, field_figures, worker_reason
from .reasons import ClaimState, ErrorCode, KernelError, Reason
from .snapshot import ClusterState, Resources, Worker, WorkerLoad


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


@dataclass(frozen=True, slots=True)
class Explanation:
    claim_id: str
    state: ClaimState
    reason: Reason
    checks: tuple[EntitlementCheck, ...]
    workers: tuple[WorkerExplanation, ...]
    queue_position: int  # 1-based among pending claims; 0 when not pending


def _settled_reason(state: ClusterState, claim_id: str) -> Reason:
    claim = state.claims[claim_id]
    return claim.reason if claim.state is ClaimState.REFUSED else Reason.ADMISSIBLE


def explain(state: ClusterState, claim_id: str, now_ns: int = 0) -> Explanation | KernelError:
    claim = state.claims.get(claim_id)
    if claim is None:
        return KernelError(ErrorCode.UNKNOWN_CLAIM, "claim_id", f"no claim {claim_id!r}")
    if claim.state is not ClaimState.PENDING:
        return Explanation(claim_id, claim.state, _settled_reason(state, claim_id), (), (), 0)
    gang_id = claim.spec.gang_id
    complete = not gang_id or gangs.complete(state, gang_id, claim.spec.gang_size)
    ev = evaluate(state, claim, now_ns, gang_ok=complete, may_preempt=not gang_id)
    reason = ev.reason
    if gang_id and complete and reason is Reason.ADMISSIBLE:
        reason = gangs.decide_gang(state, gangs.members(state, gang_id), now_ns)[0]
    req = claim.spec.resources
    # one walk of each map into a dict, then plain lookups in id order
    by_id, loads, spec, admissible = dict(state.workers.items()), dict(state.loads.items()), claim.spec, Reason.ADMISSIBLE
    workers = []
    for worker_id in state.worker_ids:
        worker, load = by_id[worker_id], loads[worker_id]
        why = worker_reason(worker, load, spec)
        workers.append(WorkerExplanation(worker_id, why is admissible, why, worker, load, req))
    position = state.pending.index((-claim.spec.priority, claim.seq, claim_id)) + 1
    return Explanation(claim_id, claim.state, reason, ev.checks, tuple(workers), position)
