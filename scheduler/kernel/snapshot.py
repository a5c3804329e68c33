"""Immutable snapshots: the records the kernel reads and `apply` produces.

Everything is a frozen, slotted dataclass or a NamedTuple holding ints,
strings, tuples and persistent maps and sequences (fast/), but the roll-up's
`Usage` records, changed only by the edit batch that made them (fast/edit.py).
Sets are kept as sorted tuples so that equal states compare equal and nothing
depends on hash order. Why the records `apply` rebuilds on every event are
NamedTuples with a `quick_replace`: fast/records.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import NamedTuple

from protos.energy import MDEV_PER_DEVICE, Grade

from .fast.pmap import PMap
from .fast.records import quick_replace
from .fast.freeindex import FreeIndex
from .fast.shapes import ShapeIndex
from .fast.sortedseq import SortedSeq
from .reasons import ClaimState, Placement, Reason


@dataclass(frozen=True, slots=True)
class Resources:
    """What a claim requests or a worker offers (RULES §5). GPUs are in
    milli-devices; `gpu_types` is sorted and without repeats."""

    cpu_millis: int = 0
    memory_mb: int = 0
    disk_mb: int = 0
    gpu_mdev: int = 0
    gpu_types: tuple[str, ...] = ()


SCALAR_FIELDS = ("cpu_millis", "memory_mb", "disk_mb", "gpu_mdev")


@dataclass(frozen=True, slots=True)
class Tenant:
    """One node of the entitlement tree as configured (RULES §3)."""

    name: str
    parent: str = ""  # empty for the root
    guarantee_uj: int = 0
    guarantee_mdev: int = 0
    weight: int = 1
    borrow_limit_uj: int | None = None
    lend_limit_uj: int | None = None


@dataclass(frozen=True, slots=True)
class WorkClass:
    """An operator-declared class of comparable work (RULES §7)."""

    name: str
    required: int = 3


@dataclass(frozen=True, slots=True)
class Threshold:
    device_kind: str  # a GPU type, or "cpu"
    uw: int           # per whole device


@dataclass(frozen=True, slots=True)
class IdlePolicy:
    """RULES §8. The default has no thresholds, so nothing is ever Idle."""

    window_ns: int = 0
    thresholds: tuple[Threshold, ...] = ()

    def threshold(self, kind: str) -> int:
        for t in self.thresholds:
            if t.device_kind == kind:
                return t.uw
        return 0


@dataclass(frozen=True, slots=True)
class Device:
    device_id: str
    device_type: str


@dataclass(frozen=True, slots=True)
class Worker:
    """A host's capacity after overrides; GPUs as concrete devices of 1000 mdev."""

    worker_id: str
    cpu_millis: int = 0
    memory_mb: int = 0
    disk_mb: int = 0
    devices: tuple[Device, ...] = ()
    max_concurrency: int = 0  # 0 = unlimited
    live: bool = True
    cordoned: bool = False    # an operator's: no new claim is placed here (kept across re-registration)

    @property
    def placeable(self) -> bool:
        """Whether the free index lists it: live and not cordoned."""
        return self.live and not self.cordoned

    @property
    def capacity(self) -> Resources:
        return Resources(self.cpu_millis, self.memory_mb, self.disk_mb,
                         MDEV_PER_DEVICE * len(self.devices),
                         tuple(sorted({d.device_type for d in self.devices})))


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """A claim as submitted (claims.proto SubmitRequest)."""

    claim_id: str
    tenant: str
    resources: Resources = Resources()
    placement: Placement = Placement.PLACEMENT_SHARED
    estimate_uj: int | None = None
    work_class: str = ""
    priority: int = 0
    gang_id: str = ""
    gang_size: int = 0


class DeviceShare(NamedTuple):
    """The part of one device a claim holds."""

    device_id: str
    mdev: int


@quick_replace
class Claim(NamedTuple):
    """A claim's life: pending, admitted (placed, holding), then settled."""

    spec: ClaimSpec
    seq: int
    state: ClaimState = ClaimState.PENDING
    reason: Reason = Reason.REASON_UNSPECIFIED
    hold_uj: int = 0
    hold_grade: Grade | None = None
    worker: str = ""
    devices: tuple[DeviceShare, ...] = ()
    borrowed: bool = False
    admitted_seq: int = 0
    admitted_ns: int = 0
    measured_uj: int = 0
    measured_grade: Grade | None = None  # None: nothing measured yet
    completed_units: int = 0
    settled_ns: int = 0
    settled_uj: int = 0  # the actual that replaced the hold
    settled_grade: Grade | None = None
    submitted_ns: int = 0  # the submission's time (0 in ledgers older than the field)
    borrowed_uj: int = 0   # the part of the hold beyond the tenant's free guarantee at admission
    bound: bool = False    # RULES §10: its devices are those its job was given outside Pool; never moved

    # the spec's id and tenant
    claim_id = property(attrgetter("spec.claim_id"), doc="The spec's claim_id.")
    tenant = property(attrgetter("spec.tenant"), doc="The spec's tenant.")

    @property
    def overrun(self) -> bool:
        return self.measured_grade is not None and self.measured_uj > self.hold_uj

    @property
    def usage_uj(self) -> int:
        """RULES §3: an open claim counts the larger of its hold and its spend."""
        return max(self.hold_uj, self.measured_uj)

    @property
    def actual(self) -> tuple[int, Grade | None]:
        """The figure that replaces the hold on settling: what was measured,
        or, with no measurement at all, the hold (it cannot be shown to have
        spent less). A pending claim never held anything."""
        if self.state is ClaimState.PENDING:
            return 0, None
        if self.measured_grade is not None:
            return self.measured_uj, self.measured_grade
        return self.hold_uj, self.hold_grade


class Usage:
    """One tree node's usage of one dimension (µJ or milli-devices, RULES §3),
    as the roll-up keeps it.

    direct: the node's own claims; total: its whole subtree; within: what the
    subtree uses within guarantees (direct, plus each child's `within` up to
    that child's guarantee: what the own pass counts); held_back: guarantee
    its children neither use nor may lend (lend limits: µJ only, so 0 for
    devices).

    Like the roll-up's lists, a Usage is never changed once made, except by
    the edit batch that made it (rollup.py: a decision updates the records it
    made in place instead of building one per node and change)."""

    __slots__ = ("direct", "total", "within", "held_back")

    def __init__(self, direct: int = 0, total: int = 0, within: int = 0, held_back: int = 0) -> None:
        self.direct, self.total, self.within, self.held_back = direct, total, within, held_back

    def _figures(self) -> tuple[int, int, int, int]:
        return self.direct, self.total, self.within, self.held_back

    def __eq__(self, other: object) -> bool:
        return type(other) is Usage and self._figures() == other._figures()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Usage(direct={self.direct}, total={self.total}, within={self.within}, held_back={self.held_back})"

    def __reduce__(self):
        return Usage, self._figures()


class NodeUsage(NamedTuple):
    """One tree node's usage, by dimension: what `Rollup[name]` reads."""

    energy: Usage   # µJ
    devices: Usage  # milli-devices


@dataclass(frozen=True, slots=True)
class ClassStats:
    """RULES §7 observations of one work class, kept as counts and a maximum."""

    observations: int = 0
    excluded_estimator: int = 0
    eligible: int = 0
    max_uj: int = 0


@quick_replace
class ClusterState(NamedTuple):
    """The whole snapshot. Derived fields (usage, loads, free_index, gangs,
    admitted_by_tenant, borrowed, worker_ids, shapes) are maintained by `apply` and equal `rebuild`'s result."""

    tree: object | None = None  # TenantTree; typed loosely to keep imports one-way
    period_ns: int = 0          # 0: the period is "none" (lifetime)
    epoch_ns: int = 0
    period_index: int = 0
    classes: PMap = PMap()       # name -> WorkClass
    idle: IdlePolicy = IdlePolicy()
    config_digest: bytes = b""
    workers: PMap = PMap()       # id -> Worker
    acked: PMap = PMap()         # worker id -> highest window seq counted
    claims: PMap = PMap()        # id -> Claim, settled ones included
    pending: SortedSeq = SortedSeq()  # (-priority, seq, id)
    settled: PMap = PMap()       # id -> None: settled in the current period
    class_stats: PMap = PMap()   # work class -> ClassStats
    next_seq: int = 1
    next_admit_seq: int = 1
    # derived
    usage: object = None        # rollup.Rollup: tenant -> NodeUsage
    loads: PMap = PMap()         # worker id -> loads.WorkerLoad
    free_index: FreeIndex = FreeIndex()  # live workers, see loads.free_key
    gangs: PMap = PMap()         # gang id -> sorted pending member ids
    admitted_by_tenant: PMap = PMap()  # tenant -> SortedSeq of (priority, id) of its admitted claims (fast/ranks.py)
    borrowed: PMap = PMap()      # admitted claim id -> True where it borrowed: reclaim's candidates
    worker_ids: tuple[str, ...] = ()  # sorted: explain lists every worker in id order without sorting
    shapes: ShapeIndex = ShapeIndex()  # single pending claims by shape and by size: the queue's equivalence classes

    def claim(self, claim_id: str) -> Claim | None:
        return self.claims.get(claim_id)


def admitted_ids(state: ClusterState) -> list[str]:
    """Every admitted claim's id, tenant by tenant (not sorted)."""
    return [c for ranked in state.admitted_by_tenant.values() for _, c in ranked]
