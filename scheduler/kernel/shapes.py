"""Pending claims by shape: the queue's equivalence classes (after Kueue's
KEP-9694). Two pending claims with the same tenant, priority, resources,
placement, declared estimate and work class are judged alike on any state:
nothing in RULES §3-§6 reads a claim's id or submission sequence except to
order the queue. So when the first claim of a shape cannot be admitted, none
behind it can either, and re-judging the queue costs one evaluation per
shape, not one per pending claim (schedule.decide).

Gang members are not in a shape: a gang is judged whole, through `gangs`.
"""

from __future__ import annotations

from .edit import Edit
from .pmap import PMap
from .snapshot import Claim, ClaimSpec
from .sortedseq import SortedSeq

_EMPTY = SortedSeq()


def shape_of(spec: ClaimSpec) -> tuple:
    """Everything a verdict reads of a claim spec, and nothing else."""
    return (spec.tenant, spec.priority, spec.resources, spec.placement, spec.estimate_uj, spec.work_class)


def pending_key(claim: Claim) -> tuple[int, int, str]:
    """The queue order: priority descending, then submission sequence."""
    return (-claim.spec.priority, claim.seq, claim.claim_id)


def with_claim(shapes: PMap, claim: Claim, present: bool, edit: Edit | None) -> PMap:
    """`shapes` with a single (non-gang) pending claim added or removed."""
    if claim.spec.gang_id:
        return shapes
    shape = shape_of(claim.spec)
    old = shapes.get(shape, _EMPTY)
    keys = old.add(pending_key(claim), edit) if present else old.remove(pending_key(claim), edit)
    if keys is old and keys:
        return shapes  # changed in place under the edit
    return shapes.set(shape, keys, edit) if keys else shapes.delete(shape, edit)


def index(claims) -> PMap:
    """The index from scratch, over pending claims (rebuild)."""
    out: dict[tuple, list] = {}
    for claim in claims:
        if not claim.spec.gang_id:
            out.setdefault(shape_of(claim.spec), []).append(pending_key(claim))
    return PMap({shape: SortedSeq(keys) for shape, keys in out.items()})
