"""The kernel's closed vocabularies. Names and integer values equal the wire
enums of protos/pool/v1 (types.proto, ops.proto), so the service converts with
`pb.Reason.Value(r.name)`; the kernel itself never imports protobuf
(tests/kernel/test_enums.py holds them equal). The few members the hot
paths read are bound to names once, in fast/members.py."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Reason(IntEnum):
    REASON_UNSPECIFIED = 0
    ADMISSIBLE = 1
    INVALID = 2
    GANG_INCOMPLETE = 3
    GANG_NEVER_FITS = 4
    DEVICES_ENTITLEMENT = 5
    ENERGY_OWN_PASS = 6
    ESTIMATOR_MAY_NOT_BORROW = 7
    ENERGY_SURPLUS = 8
    NO_ELIGIBLE_WORKER = 9
    WORKER_INELIGIBLE = 20
    EXCLUSIVE_WORKER_BUSY = 21
    WORKER_HAS_EXCLUSIVE_TASK = 22
    RESOURCE_RESERVATION_UNAVAILABLE = 23
    WORKER_CONCURRENCY_REACHED = 24
    WORKER_CORDONED = 200


class IdleVerdict(IntEnum):
    IDLE_VERDICT_UNSPECIFIED = 0
    NOTHING_HELD = 1
    NO_VERDICT = 2
    UNKNOWN = 3
    IDLE = 4
    BUSY = 5


class ClaimState(IntEnum):
    CLAIM_STATE_UNSPECIFIED = 0
    PENDING = 1
    ADMITTED = 2
    RELEASED = 3
    PREEMPTED = 4
    RECLAIMED = 5
    REFUSED = 6


class CheckStep(IntEnum):
    CHECK_STEP_UNSPECIFIED = 0
    VALIDATE = 1
    GANG_COMPLETE = 2
    DEVICES_ENTITLEMENT_CHECK = 3
    ENERGY_OWN_PASS_CHECK = 4
    ESTIMATOR_GRADE_CHECK = 5
    ENERGY_SURPLUS_PASS_CHECK = 6
    PLACEMENT_CHECK = 7


class Tier(IntEnum):
    TIER_UNSPECIFIED = 0
    MEASURED = 1
    UNMEASURED = 2


class Placement(IntEnum):
    PLACEMENT_SHARED = 0
    PLACEMENT_EXCLUSIVE = 1


class ErrorCode(IntEnum):
    """The subset of `pool.v1.ErrorCode` the kernel can raise; same values."""

    INVALID_CLAIM = 1
    UNKNOWN_TENANT = 2
    DUPLICATE_CLAIM = 3
    UNKNOWN_CLAIM = 4
    CLAIM_NOT_OPEN = 5
    PROGRESS_REGRESSED = 6
    UNKNOWN_WORK_CLASS = 9
    EMPTY_WORK_CLASS = 10
    INVALID_ARGUMENT = 14
    UNKNOWN_WORKER = 200
    CLAIM_NEVER_FITS = 120
    BIND_CONFLICT = 220
    CLAIM_NOT_ADMITTED = 221


OPEN_STATES = frozenset({ClaimState.PENDING, ClaimState.ADMITTED})


@dataclass(frozen=True, slots=True)
class KernelError:
    """A refused request: returned, never raised, so the caller maps it to a
    gRPC status (code) and a message naming the field."""

    code: ErrorCode
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"
