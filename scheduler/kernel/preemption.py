"""Preemption order and victim choice (RULES §6).

Victims are taken only (a) to give a claim that fits its own guarantee the
capacity that was lent — the victims are borrowed claims, of other tenants or
of lower priority in the same tenant — or (b) for a claim that outranks them
within its own tenant. A borrowing claim never preempts, and a victim always
either borrowed from the preemptor's guarantee or has a strictly lower
priority in the same tenant, so no two claims can preempt each other in turn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple
from functools import cmp_to_key, reduce

from protos.energy import Grade

from .reasons import Tier
from .snapshot import Claim, ClusterState


def tier(claim: Claim) -> Tier:
    measured = (claim.completed_units > 0 and claim.measured_grade is not None
                and claim.measured_grade < Grade.Estimator)
    return Tier.MEASURED if measured else Tier.UNMEASURED


def _compare(a: Claim, b: Claim) -> int:
    ta, tb = tier(a), tier(b)
    if ta != tb:
        return -1 if ta is Tier.MEASURED else 1
    if ta is Tier.MEASURED:
        # worst µJ per completed unit first, exactly: a_uj/a_units vs b_uj/b_units
        left, right = a.measured_uj * b.completed_units, b.measured_uj * a.completed_units
        if left != right:
            return -1 if left > right else 1
    for x, y in ((a.spec.priority, b.spec.priority), (-a.admitted_seq, -b.admitted_seq), (a.claim_id, b.claim_id)):
        if x != y:
            return -1 if x < y else 1
    return 0


def ordered(claims: Iterable[Claim]) -> list[Claim]:
    """Worst first: measured by µJ per unit, then unmeasured; ties by lower
    priority, most recently admitted, id."""
    return sorted(claims, key=cmp_to_key(_compare))


def open_claims(state: ClusterState) -> list[Claim]:
    return [state.claims[c] for ids in state.open_by_tenant.values() for c in ids]


def reclaim_candidates(state: ClusterState, claim: Claim) -> list[Claim]:
    """Borrowed claims of other tenants or of lower priority: read from the
    `borrowed` index, so the cost follows what was lent, not every open claim."""
    borrowed = (state.claims[c] for c in state.borrowed)
    return ordered(c for c in borrowed if c.tenant != claim.tenant or c.spec.priority < claim.spec.priority)


def priority_candidates(state: ClusterState, claim: Claim) -> list[Claim]:
    """The tenant's open claims of lower priority: filtered on the priorities
    `open_by_tenant` keeps, so only candidates are looked up."""
    ids = state.open_by_tenant.get(claim.tenant)
    priority = claim.spec.priority
    if not ids or min(ids.values()) >= priority:
        return []  # the usual answer, found without a Python-level loop
    return ordered(state.claims[c] for c, p in ids.items() if p < priority)


class Victims(NamedTuple):
    claims: tuple[Claim, ...]
    state: ClusterState  # the state with them removed


class Blocker(NamedTuple):
    """What keeps a claim out: the failing check, its dimension, the node,
    and the usage that check compared there."""

    check: str
    dim: str
    node: str
    usage: int


def _frees(before: Blocker, after: Blocker | None) -> bool:
    """Whether a removal reduced what blocks: the block is gone or moved, or
    the blocked usage went down (an unmeasured claim settles at its hold, so
    preempting it frees no energy)."""
    return after is None or after[:3] != before[:3] or after.usage < before.usage


def choose(state: ClusterState, candidates: Callable[[], list[Claim]],
           blocking: Callable[[ClusterState], Blocker | None],
           remove: Callable[[ClusterState, Claim], ClusterState], blocked: Blocker | None) -> Victims | None:
    """Walk the candidates in order, taking each one under the node that
    still blocks whose removal frees some of what blocks, until nothing
    blocks; None (take nobody) if they cannot suffice. `blocked` is what
    blocks in `state` (the caller often knows it already); candidates are
    only listed when something blocks."""
    start, taken = state, []
    for candidate in candidates() if blocked is not None else ():
        if blocked is None:
            break
        if blocked.node in state.tree.path(candidate.tenant):
            after = remove(state, candidate)
            now = blocking(after)
            if _frees(blocked, now):
                taken.append(candidate)
                state, blocked = after, now
    if blocked is not None:
        return None
    return _spared(start, taken, blocking, remove) if len(taken) > 1 else Victims(tuple(taken), state)


def _spared(start: ClusterState, taken: list[Claim], blocking: Callable[[ClusterState], Blocker | None],
            remove: Callable[[ClusterState, Claim], ClusterState]) -> Victims:
    """The victims less any the others make unnecessary, the last taken
    spared first (the worst are kept): only as many as needed are taken."""
    kept = list(taken)
    for victim in reversed(taken):
        rest = [v for v in kept if v is not victim]
        if blocking(reduce(remove, rest, start)) is None:
            kept = rest
    return Victims(tuple(kept), reduce(remove, kept, start))
