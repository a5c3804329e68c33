"""Pending claims by shape: the queue's equivalence classes (after Kueue's
KEP-9694). Two pending claims with the same tenant, priority, resources,
placement, declared estimate and work class are judged alike on any state:
nothing in RULES §3-§6 reads a claim's id or submission sequence except to
order the queue. So when the first claim of a shape cannot be admitted, none
behind it can either, and re-judging the queue costs one evaluation per
shape, not one per pending claim (queue.decide).

The index holds each single pending claim twice, in two sorted sequences:

- `by_shape`, (shape, queue key): a shape's claims sit together in queue
  order, its first claim is one bisect away, and a tenant's shapes sit
  together by priority (a shape starts with its tenant and priority);
- `by_size`, (gpu_mdev, floor_uj, shape, queue key): the shapes by what
  they ask of a worker's devices and, at least, of the root's energy, so the
  shapes that fit under given figures are one range per GPU size
  (fast/movable.py reads both).

Sequences rather than maps of sequences, since they change on every
admission: one block edit each instead of a map lookup, a block edit and a
map update. Moving from a shape to the next is one bisect (`_PAST`), so
listing shapes costs per shape, not per claim.

Gang members are not in a shape: a gang is judged whole, through `gangs`.
"""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, NamedTuple

from .records import new_tuple
from .sortedseq import SortedSeq

if TYPE_CHECKING:
    from ..snapshot import Claim, ClaimSpec

# sorts after every queue key (-priority, seq, id) and every priority: a
# bisect to (..., _PAST) lands just after the entries it follows
_PAST = (float("inf"),)
_LAST = float("inf")


class Shape(NamedTuple):
    """Everything a verdict reads of a claim spec, and nothing else; no
    declared estimate sorts as -1 (estimates are never negative). Tenant and
    priority lead, so a tenant's shapes sit together, by priority."""

    tenant: str
    priority: int
    placement: int
    estimate_uj: int
    work_class: str
    cpu_millis: int
    memory_mb: int
    disk_mb: int
    gpu_mdev: int
    gpu_types: tuple[str, ...]

    @property
    def floor_uj(self) -> int:
        """The least a claim of this shape holds: its declared estimate (a
        work class's derived figure can only raise the hold, admission.hold_for),
        0 when it declares none."""
        return max(0, self.estimate_uj)


def shape_of(spec: ClaimSpec) -> Shape:
    req = spec.resources
    return new_tuple(Shape, (spec.tenant, spec.priority, spec.placement,
                                 -1 if spec.estimate_uj is None else spec.estimate_uj, spec.work_class,
                                 req.cpu_millis, req.memory_mb, req.disk_mb, req.gpu_mdev, req.gpu_types))


def pending_key(claim: Claim) -> tuple[int, int, str]:
    """The queue order: priority descending, then submission sequence."""
    return (-claim.spec.priority, claim.seq, claim.claim_id)


def gang_key(claims, members) -> tuple:
    """The queue key of a gang's first pending member (its pending members'
    ids): where the gang is decided."""
    return min(pending_key(claims[m]) for m in members)


class ShapeIndex(NamedTuple):
    by_shape: SortedSeq = SortedSeq()   # (shape, queue key)
    by_size: SortedSeq = SortedSeq()    # (gpu_mdev, floor_uj, shape, queue key)


def _entries(shape: Shape, key: tuple) -> tuple[tuple, tuple]:
    return (shape, key), (shape.gpu_mdev, shape.floor_uj, shape, key)


def with_claim(shapes: ShapeIndex, claim: Claim, key: tuple, present: bool) -> ShapeIndex:
    """`shapes` with a single (non-gang) pending claim, whose queue key is
    `key`, added or removed."""
    if claim.spec.gang_id:
        return shapes
    by_shape, by_size = _entries(shape_of(claim.spec), key)
    if present:
        return new_tuple(ShapeIndex, (shapes.by_shape.add(by_shape), shapes.by_size.add(by_size)))
    return new_tuple(ShapeIndex, (shapes.by_shape.remove(by_shape), shapes.by_size.remove(by_size)))


def first_of(shapes: ShapeIndex, shape: Shape) -> tuple | None:
    """The queue key of the shape's first pending claim, None when none waits."""
    entry = shapes.by_shape.ceiling((shape,))  # (shape,) sorts before every (shape, key)
    return entry[1] if entry is not None and entry[0] == shape else None


def waiting_tenants(shapes: ShapeIndex) -> list[str]:
    """Every tenant with a single claim pending, by name: one bisect per
    tenant (a tenant's claims span blocks of several shapes, which
    `SortedSeq.firsts` by shape would step through shape by shape)."""
    out, seq = [], shapes.by_shape
    entry = seq.ceiling(())
    while entry is not None:
        out.append(entry[0].tenant)
        entry = seq.ceiling(_past_every_shape_of(entry[0].tenant))
    return out


_SHAPE = itemgetter(0)


def _past_every_key_of(shape: Shape) -> tuple:
    """An entry after every (shape, queue key) entry of `shape`, and before the next shape's."""
    return (shape, _PAST)


def _past_every_shape_of(tenant: str) -> tuple:
    """An entry after every entry of the tenant's shapes, and before the next tenant's."""
    return ((tenant, _LAST),)


def of_tenant(shapes: ShapeIndex, tenant: str, above_priority: float = -_LAST) -> list[tuple[Shape, tuple]]:
    """The tenant's shapes of a priority above `above_priority`, by
    priority, each with the queue key of its first claim."""
    return shapes.by_shape.firsts(_SHAPE, _past_every_key_of, ((tenant, above_priority, _LAST),),
                                  _past_every_shape_of(tenant))


def sized(shapes: ShapeIndex, max_mdev: int, max_floor_uj: int) -> list[tuple[Shape, tuple]]:
    """The shapes asking at most `max_mdev` milli-devices whose hold can be
    as low as `max_floor_uj`, each with the queue key of its first claim:
    one range per GPU size present."""
    out, seq = [], shapes.by_size
    entry = seq.ceiling(())
    while entry is not None and entry[0] <= max_mdev:
        mdev = entry[0]
        out += ((e[2], e[3]) for e in seq.firsts(_SIZED_SHAPE, _past_every_sized_key_of, (mdev,),
                                                  (mdev, max_floor_uj + 1)))
        entry = seq.ceiling((mdev, _LAST))   # the next GPU size
    return out


_SIZED_SHAPE = itemgetter(2)


def _past_every_sized_key_of(shape: Shape) -> tuple:
    return (shape.gpu_mdev, shape.floor_uj, shape, _PAST)


def index(claims) -> ShapeIndex:
    """The index from scratch, over pending claims (rebuild)."""
    pairs = [_entries(shape_of(c.spec), pending_key(c)) for c in claims if not c.spec.gang_id]
    return ShapeIndex(SortedSeq(p[0] for p in pairs), SortedSeq(p[1] for p in pairs))
