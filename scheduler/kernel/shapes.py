"""Pending claims by shape: the queue's equivalence classes (after Kueue's
KEP-9694). Two pending claims with the same tenant, priority, resources,
placement, declared estimate and work class are judged alike on any state:
nothing in RULES §3-§6 reads a claim's id or submission sequence except to
order the queue. So when the first claim of a shape cannot be admitted, none
behind it can either, and re-judging the queue costs one evaluation per
shape, not one per pending claim (schedule.decide).

The index is one sorted sequence of (shape, queue key) entries: a shape's
claims sit together in queue order, its first claim is one bisect away, and
the shapes are listed in one C-level walk. One sequence rather than a map of
sequences, since it is changed on every admission: one block edit instead of
a map lookup, a block edit and a map update.

Gang members are not in a shape: a gang is judged whole, through `gangs`.
"""

from __future__ import annotations

from operator import itemgetter

from .snapshot import Claim, ClaimSpec
from .sortedseq import SortedSeq


def shape_of(spec: ClaimSpec) -> tuple:
    """Everything a verdict reads of a claim spec, and nothing else; no
    declared estimate sorts as -1 (estimates are never negative)."""
    req = spec.resources
    return (spec.tenant, spec.priority, spec.placement, -1 if spec.estimate_uj is None else spec.estimate_uj,
            spec.work_class, req.cpu_millis, req.memory_mb, req.disk_mb, req.gpu_mdev, req.gpu_types)


def pending_key(claim: Claim) -> tuple[int, int, str]:
    """The queue order: priority descending, then submission sequence."""
    return (-claim.spec.priority, claim.seq, claim.claim_id)


def with_claim(shapes: SortedSeq, claim: Claim, key: tuple, present: bool) -> SortedSeq:
    """`shapes` with a single (non-gang) pending claim, whose queue key is
    `key`, added or removed."""
    if claim.spec.gang_id:
        return shapes
    entry = (shape_of(claim.spec), key)
    return shapes.add(entry) if present else shapes.remove(entry)


def first_of(shapes: SortedSeq, shape: tuple) -> tuple | None:
    """The queue key of the shape's first pending claim, None when none waits."""
    entry = shapes.ceiling((shape,))  # (shape,) sorts before every (shape, key)
    return entry[1] if entry is not None and entry[0] == shape else None


def listed(shapes: SortedSeq) -> list[tuple]:
    """Every shape with a pending claim: one step per block of the index and
    one per shape, however many claims each shape holds."""
    return shapes.distinct(_SHAPE, _past_every_key_of)


_SHAPE = itemgetter(0)
_PAST_EVERY_QUEUE_KEY = (float("inf"),)   # sorts after every (-priority, seq, claim id)


def _past_every_key_of(shape: tuple) -> tuple:
    """An entry after every (shape, queue key) entry of `shape`, and before the next shape's."""
    return (shape, _PAST_EVERY_QUEUE_KEY)


def index(claims) -> SortedSeq:
    """The index from scratch, over pending claims (rebuild)."""
    return SortedSeq((shape_of(c.spec), pending_key(c)) for c in claims if not c.spec.gang_id)
