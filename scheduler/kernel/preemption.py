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

from .entitlement import DEVICES, ENERGY, own_pass, within_allowance
from .events import Preempted
from .fast import ranks
from .reasons import Tier
from .requests import settle
from .snapshot import Claim, ClusterState, admitted_ids
from .transitions import apply


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


def admitted_claims(state: ClusterState) -> list[Claim]:
    return [state.claims[c] for c in admitted_ids(state)]


def reclaim_candidates(state: ClusterState, claim: Claim) -> list[Claim]:
    """Borrowed claims of other tenants or of lower priority: read from the
    `borrowed` index, so the cost follows what was lent, not every open claim."""
    borrowed = (state.claims[c] for c in state.borrowed)
    return ordered(c for c in borrowed if c.tenant != claim.tenant or c.spec.priority < claim.spec.priority)


def priority_candidates(state: ClusterState, claim: Claim) -> list[Claim]:
    """The tenant's open claims of lower priority: read from
    `admitted_by_tenant`, in priority order (fast/ranks.py), so only
    candidates are looked up, however many claims the tenant holds."""
    return ordered(state.claims[c] for c in ranks.below(state.admitted_by_tenant, claim.tenant, claim.spec.priority))


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


# What a preemptor needs freed, and the victims that free it (RULES §6: "a
# victim must free some of what blocks").

def own_blocker(claim: Claim, hold_uj: int) -> Callable[[ClusterState], Blocker | None]:
    """What still blocks the claim's own-pass admission on a state, or None:
    (check, dimension, node, the usage that check compared), checked lazily
    in order: the own pass, then the allowances without borrowing."""
    mdev = claim.spec.resources.gpu_mdev

    def blocking(state: ClusterState) -> Blocker | None:
        tree, usage, tenant = state.tree, state.usage, claim.tenant
        for check in (own_pass, within_allowance):
            for dim, amount in ((ENERGY, hold_uj), (DEVICES, mdev)):
                fit = own_pass(tree, usage, tenant, dim, amount) if check is own_pass else within_allowance(
                    tree, usage, tenant, dim, amount, False)
                if not fit.ok:
                    return Blocker(check.__name__, dim, fit.node, fit.usage)
        return None
    return blocking


def _preempter(claim: Claim, now_ns: int) -> Callable[[ClusterState, Claim], ClusterState]:
    def remove(state: ClusterState, victim: Claim) -> ClusterState:
        return apply(state, settle(state, victim.claim_id, now_ns, Preempted, by_claim=claim.claim_id))
    return remove


def reclaim_victims(state: ClusterState, claim: Claim, hold_uj: int, now_ns: int,
                    may_preempt: bool = True) -> Victims | None:
    """(a) For a claim within its own guarantee: the borrowed claims whose
    preemption takes back what its tenant lent (none taken when nothing
    blocks); None when they cannot suffice."""
    blocking = own_blocker(claim, hold_uj)
    return choose(state, lambda: reclaim_candidates(state, claim) if may_preempt else [],
                  blocking, _preempter(claim, now_ns), blocking(state))


def outranked_victims(state: ClusterState, claim: Claim, hold_uj: int, now_ns: int) -> Victims | None:
    """(b) For a claim that would have to borrow: the lower-priority claims of
    its own tenant whose preemption lets it fit its own guarantee instead;
    None when there are none or they cannot suffice."""
    candidates = priority_candidates(state, claim)
    if not candidates:
        return None
    blocking = own_blocker(claim, hold_uj)
    return choose(state, lambda: candidates, blocking, _preempter(claim, now_ns), blocking(state))
