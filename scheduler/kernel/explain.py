"""Explain (RULES §5): why a claim is where it is. For a pending claim, every
entitlement check of §3 with its figures, then every worker with ok, reason
and per-field figures; the headline is the first failing check."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from operator import is_
from typing import NamedTuple

from . import gangs
from .admission import EntitlementCheck, evaluate
from .placement import FieldFigure, field_figures, reasoner
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
    # one walk of each map into a dict, then every step per worker in C
    # (map, zip, tuple.__new__) but the verdict itself
    ids, by_id, loads = state.worker_ids, state.workers.to_dict(), state.loads.to_dict()
    capacities, worker_loads = list(map(by_id.__getitem__, ids)), list(map(loads.__getitem__, ids))
    whys = list(map(reasoner(claim.spec), capacities, worker_loads))
    oks = map(is_, whys, repeat(Reason.ADMISSIBLE))
    workers = tuple(map(tuple.__new__, repeat(WorkerExplanation),
                        zip(ids, oks, whys, capacities, worker_loads, repeat(claim.spec.resources))))
    position = state.pending.index((-claim.spec.priority, claim.seq, claim_id)) + 1
    return Explanation(claim_id, claim.state, reason, ev.checks, workers, position)
