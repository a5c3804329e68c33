"""Every state change is one of these events. Each has a `kind` and a body of
CBOR-friendly values (see codec.py); `event_from_body` is its exact inverse.
The ledger stores (kind, body); replay is a fold of `apply` over them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from protos.energy import Grade

from .codec import encode, from_body
from .reasons import Reason
from .snapshot import ClaimSpec, DeviceShare, IdlePolicy, Tenant, Worker, WorkClass


class Event:
    __slots__ = ()
    kind: ClassVar[str]

    def to_body(self) -> dict[str, Any]:
        return encode(self)


@dataclass(frozen=True, slots=True)
class ConfigApplied(Event):
    kind: ClassVar[str] = "config_applied"
    tenants: tuple[Tenant, ...]
    period_ns: int = 0
    epoch_ns: int = 0
    classes: tuple[WorkClass, ...] = ()
    idle: IdlePolicy = IdlePolicy()
    digest: bytes = b""


@dataclass(frozen=True, slots=True)
class WorkerRegistered(Event):
    kind: ClassVar[str] = "worker_registered"
    worker: Worker


@dataclass(frozen=True, slots=True)
class WorkerLiveness(Event):
    kind: ClassVar[str] = "worker_liveness"
    worker_id: str
    live: bool


@dataclass(frozen=True, slots=True)
class WorkerCordoned(Event):
    """An operator cordons (or uncordons) a worker: nothing new is placed on
    a cordoned one; what it holds runs on."""

    kind: ClassVar[str] = "worker_cordoned"
    worker_id: str
    cordoned: bool


@dataclass(frozen=True, slots=True)
class ClaimSubmitted(Event):
    kind: ClassVar[str] = "claim_submitted"
    spec: ClaimSpec
    seq: int
    at_ns: int = 0


@dataclass(frozen=True, slots=True)
class ClaimAdmitted(Event):
    kind: ClassVar[str] = "claim_admitted"
    claim_id: str
    hold_uj: int
    hold_grade: Grade
    worker: str
    devices: tuple[DeviceShare, ...]
    borrowed: bool
    admitted_seq: int
    at_ns: int
    borrowed_uj: int = 0


@dataclass(frozen=True, slots=True)
class ClaimRefused(Event):
    kind: ClassVar[str] = "claim_refused"
    claim_id: str
    reason: Reason
    at_ns: int


@dataclass(frozen=True, slots=True)
class MeterDelta:
    claim_id: str
    uj: int
    grade: Grade


@dataclass(frozen=True, slots=True)
class Metered(Event):
    """Energy newly counted for claims from one host's window `window_seq`.
    A window at or below the host's highest counted seq changes nothing."""

    kind: ClassVar[str] = "metered"
    worker_id: str
    window_seq: int
    deltas: tuple[MeterDelta, ...]


@dataclass(frozen=True, slots=True)
class Progress(Event):
    kind: ClassVar[str] = "progress"
    claim_id: str
    completed_units: int


@dataclass(frozen=True, slots=True)
class Settled(Event):
    """A claim leaves: `actual_uj`/`actual_grade` is the figure that replaces
    its hold in usage (its measured total, or the hold when nothing was
    measured). A pending claim released is withdrawn and counts nothing."""

    kind: ClassVar[str] = "settled"
    claim_id: str
    actual_uj: int
    actual_grade: Grade | None
    completed_units: int
    at_ns: int


@dataclass(frozen=True, slots=True)
class Released(Settled):
    kind: ClassVar[str] = "released"


@dataclass(frozen=True, slots=True)
class Preempted(Settled):
    kind: ClassVar[str] = "preempted"
    by_claim: str = ""


@dataclass(frozen=True, slots=True)
class Reclaimed(Settled):
    kind: ClassVar[str] = "reclaimed"


@dataclass(frozen=True, slots=True)
class Binding:
    """One claim's devices after a bind: the bound claim's, or an unbound one's moved away."""

    claim_id: str
    devices: tuple[DeviceShare, ...]
    bound: bool


@dataclass(frozen=True, slots=True)
class ClaimBound(Event):
    """RULES §10: an admitted claim bound to the devices its job was given on
    its worker; `bindings` holds it (bound) and every unbound claim the bind
    moved, each with its new devices."""

    kind: ClassVar[str] = "claim_bound"
    worker_id: str
    bindings: tuple[Binding, ...]


@dataclass(frozen=True, slots=True)
class PeriodRolled(Event):
    kind: ClassVar[str] = "period_rolled"
    period_index: int


EVENT_TYPES: dict[str, type] = {cls.kind: cls for cls in (
    ConfigApplied, WorkerRegistered, WorkerLiveness, WorkerCordoned, ClaimSubmitted, ClaimAdmitted, ClaimRefused,
    Metered, Progress, Released, Preempted, Reclaimed, PeriodRolled, ClaimBound)}


def event_from_body(kind: str, body: dict[str, Any]) -> Event:
    try:
        cls = EVENT_TYPES[kind]
    except KeyError:
        raise ValueError(f"unknown event kind {kind!r}") from None
    return from_body(cls, body)
