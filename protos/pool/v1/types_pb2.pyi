from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Grade(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GRADE_UNSPECIFIED: _ClassVar[Grade]
    GRADE_HW_SHUNT: _ClassVar[Grade]
    GRADE_MODEL_BASED: _ClassVar[Grade]
    GRADE_ESTIMATOR: _ClassVar[Grade]

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_CODE_UNSPECIFIED: _ClassVar[ErrorCode]
    INVALID_CLAIM: _ClassVar[ErrorCode]
    UNKNOWN_TENANT: _ClassVar[ErrorCode]
    DUPLICATE_CLAIM: _ClassVar[ErrorCode]
    UNKNOWN_CLAIM: _ClassVar[ErrorCode]
    CLAIM_NOT_OPEN: _ClassVar[ErrorCode]
    PROGRESS_REGRESSED: _ClassVar[ErrorCode]
    UNREGISTERED_AGENT: _ClassVar[ErrorCode]
    INVALID_WINDOW: _ClassVar[ErrorCode]
    UNKNOWN_WORK_CLASS: _ClassVar[ErrorCode]
    EMPTY_WORK_CLASS: _ClassVar[ErrorCode]
    NOT_READY: _ClassVar[ErrorCode]
    LEDGER_UNAVAILABLE: _ClassVar[ErrorCode]
    WITNESS_REJECTED: _ClassVar[ErrorCode]
    INVALID_ARGUMENT: _ClassVar[ErrorCode]
    WATCH_LAGGED: _ClassVar[ErrorCode]
    NOT_LEADER: _ClassVar[ErrorCode]
    SHUTTING_DOWN: _ClassVar[ErrorCode]
    NO_CLIENT_CERTIFICATE: _ClassVar[ErrorCode]
    UNKNOWN_PRINCIPAL: _ClassVar[ErrorCode]
    ROLE_NOT_ALLOWED: _ClassVar[ErrorCode]
    OUT_OF_SCOPE: _ClassVar[ErrorCode]
    UNKNOWN_WORKER: _ClassVar[ErrorCode]
    CLAIM_NEVER_FITS: _ClassVar[ErrorCode]
    HOST_STREAMING: _ClassVar[ErrorCode]
    DEVICES_HELD: _ClassVar[ErrorCode]
    TOO_LARGE: _ClassVar[ErrorCode]
    RATE_LIMITED: _ClassVar[ErrorCode]
    TOO_MANY_OPEN_CLAIMS: _ClassVar[ErrorCode]
    BIND_CONFLICT: _ClassVar[ErrorCode]
    CLAIM_NOT_ADMITTED: _ClassVar[ErrorCode]
    PRINCIPAL_LIMIT: _ClassVar[ErrorCode]
    SERVICE_BUSY: _ClassVar[ErrorCode]
    AMBIGUOUS_CLAIM: _ClassVar[ErrorCode]

class Placement(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PLACEMENT_SHARED: _ClassVar[Placement]
    PLACEMENT_EXCLUSIVE: _ClassVar[Placement]

class ClaimState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLAIM_STATE_UNSPECIFIED: _ClassVar[ClaimState]
    PENDING: _ClassVar[ClaimState]
    ADMITTED: _ClassVar[ClaimState]
    RELEASED: _ClassVar[ClaimState]
    PREEMPTED: _ClassVar[ClaimState]
    RECLAIMED: _ClassVar[ClaimState]
    REFUSED: _ClassVar[ClaimState]

class Reason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REASON_UNSPECIFIED: _ClassVar[Reason]
    ADMISSIBLE: _ClassVar[Reason]
    INVALID: _ClassVar[Reason]
    GANG_INCOMPLETE: _ClassVar[Reason]
    GANG_NEVER_FITS: _ClassVar[Reason]
    DEVICES_ENTITLEMENT: _ClassVar[Reason]
    ENERGY_OWN_PASS: _ClassVar[Reason]
    ESTIMATOR_MAY_NOT_BORROW: _ClassVar[Reason]
    ENERGY_SURPLUS: _ClassVar[Reason]
    NO_ELIGIBLE_WORKER: _ClassVar[Reason]
    WORKER_INELIGIBLE: _ClassVar[Reason]
    EXCLUSIVE_WORKER_BUSY: _ClassVar[Reason]
    WORKER_HAS_EXCLUSIVE_TASK: _ClassVar[Reason]
    RESOURCE_RESERVATION_UNAVAILABLE: _ClassVar[Reason]
    WORKER_CONCURRENCY_REACHED: _ClassVar[Reason]
    WORKER_CORDONED: _ClassVar[Reason]

class IdleVerdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IDLE_VERDICT_UNSPECIFIED: _ClassVar[IdleVerdict]
    NOTHING_HELD: _ClassVar[IdleVerdict]
    NO_VERDICT: _ClassVar[IdleVerdict]
    UNKNOWN: _ClassVar[IdleVerdict]
    IDLE: _ClassVar[IdleVerdict]
    BUSY: _ClassVar[IdleVerdict]

class DeviceKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEVICE_KIND_UNSPECIFIED: _ClassVar[DeviceKind]
    GPU: _ClassVar[DeviceKind]
    CPU_PACKAGE: _ClassVar[DeviceKind]

class MeterKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    METER_KIND_UNSPECIFIED: _ClassVar[MeterKind]
    NVML_ENERGY: _ClassVar[MeterKind]
    NVML_POWER: _ClassVar[MeterKind]
    RAPL: _ClassVar[MeterKind]
    REPLAY: _ClassVar[MeterKind]
    ESTIMATOR: _ClassVar[MeterKind]

class GapReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GAP_REASON_UNSPECIFIED: _ClassVar[GapReason]
    GAP_AGENT_DOWN: _ClassVar[GapReason]
    GAP_COUNTER_RESET: _ClassVar[GapReason]
    GAP_METER_ERROR: _ClassVar[GapReason]
    GAP_SPOOL_OVERFLOW: _ClassVar[GapReason]
    GAP_REFUSED: _ClassVar[GapReason]
GRADE_UNSPECIFIED: Grade
GRADE_HW_SHUNT: Grade
GRADE_MODEL_BASED: Grade
GRADE_ESTIMATOR: Grade
ERROR_CODE_UNSPECIFIED: ErrorCode
INVALID_CLAIM: ErrorCode
UNKNOWN_TENANT: ErrorCode
DUPLICATE_CLAIM: ErrorCode
UNKNOWN_CLAIM: ErrorCode
CLAIM_NOT_OPEN: ErrorCode
PROGRESS_REGRESSED: ErrorCode
UNREGISTERED_AGENT: ErrorCode
INVALID_WINDOW: ErrorCode
UNKNOWN_WORK_CLASS: ErrorCode
EMPTY_WORK_CLASS: ErrorCode
NOT_READY: ErrorCode
LEDGER_UNAVAILABLE: ErrorCode
WITNESS_REJECTED: ErrorCode
INVALID_ARGUMENT: ErrorCode
WATCH_LAGGED: ErrorCode
NOT_LEADER: ErrorCode
SHUTTING_DOWN: ErrorCode
NO_CLIENT_CERTIFICATE: ErrorCode
UNKNOWN_PRINCIPAL: ErrorCode
ROLE_NOT_ALLOWED: ErrorCode
OUT_OF_SCOPE: ErrorCode
UNKNOWN_WORKER: ErrorCode
CLAIM_NEVER_FITS: ErrorCode
HOST_STREAMING: ErrorCode
DEVICES_HELD: ErrorCode
TOO_LARGE: ErrorCode
RATE_LIMITED: ErrorCode
TOO_MANY_OPEN_CLAIMS: ErrorCode
BIND_CONFLICT: ErrorCode
CLAIM_NOT_ADMITTED: ErrorCode
PRINCIPAL_LIMIT: ErrorCode
SERVICE_BUSY: ErrorCode
AMBIGUOUS_CLAIM: ErrorCode
PLACEMENT_SHARED: Placement
PLACEMENT_EXCLUSIVE: Placement
CLAIM_STATE_UNSPECIFIED: ClaimState
PENDING: ClaimState
ADMITTED: ClaimState
RELEASED: ClaimState
PREEMPTED: ClaimState
RECLAIMED: ClaimState
REFUSED: ClaimState
REASON_UNSPECIFIED: Reason
ADMISSIBLE: Reason
INVALID: Reason
GANG_INCOMPLETE: Reason
GANG_NEVER_FITS: Reason
DEVICES_ENTITLEMENT: Reason
ENERGY_OWN_PASS: Reason
ESTIMATOR_MAY_NOT_BORROW: Reason
ENERGY_SURPLUS: Reason
NO_ELIGIBLE_WORKER: Reason
WORKER_INELIGIBLE: Reason
EXCLUSIVE_WORKER_BUSY: Reason
WORKER_HAS_EXCLUSIVE_TASK: Reason
RESOURCE_RESERVATION_UNAVAILABLE: Reason
WORKER_CONCURRENCY_REACHED: Reason
WORKER_CORDONED: Reason
IDLE_VERDICT_UNSPECIFIED: IdleVerdict
NOTHING_HELD: IdleVerdict
NO_VERDICT: IdleVerdict
UNKNOWN: IdleVerdict
IDLE: IdleVerdict
BUSY: IdleVerdict
DEVICE_KIND_UNSPECIFIED: DeviceKind
GPU: DeviceKind
CPU_PACKAGE: DeviceKind
METER_KIND_UNSPECIFIED: MeterKind
NVML_ENERGY: MeterKind
NVML_POWER: MeterKind
RAPL: MeterKind
REPLAY: MeterKind
ESTIMATOR: MeterKind
GAP_REASON_UNSPECIFIED: GapReason
GAP_AGENT_DOWN: GapReason
GAP_COUNTER_RESET: GapReason
GAP_METER_ERROR: GapReason
GAP_SPOOL_OVERFLOW: GapReason
GAP_REFUSED: GapReason

class Resources(_message.Message):
    __slots__ = ("cpu_millis", "memory_mb", "disk_mb", "gpu_mdev", "gpu_types")
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    DISK_MB_FIELD_NUMBER: _ClassVar[int]
    GPU_MDEV_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPES_FIELD_NUMBER: _ClassVar[int]
    cpu_millis: int
    memory_mb: int
    disk_mb: int
    gpu_mdev: int
    gpu_types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cpu_millis: _Optional[int] = ..., memory_mb: _Optional[int] = ..., disk_mb: _Optional[int] = ..., gpu_mdev: _Optional[int] = ..., gpu_types: _Optional[_Iterable[str]] = ...) -> None: ...

class DeviceMeter(_message.Message):
    __slots__ = ("device_id", "kind", "device_type", "meter", "grade", "memory_bytes", "mig_enabled", "downgrades")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TYPE_FIELD_NUMBER: _ClassVar[int]
    METER_FIELD_NUMBER: _ClassVar[int]
    GRADE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MIG_ENABLED_FIELD_NUMBER: _ClassVar[int]
    DOWNGRADES_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    kind: DeviceKind
    device_type: str
    meter: MeterKind
    grade: Grade
    memory_bytes: int
    mig_enabled: bool
    downgrades: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, device_id: _Optional[str] = ..., kind: _Optional[_Union[DeviceKind, str]] = ..., device_type: _Optional[str] = ..., meter: _Optional[_Union[MeterKind, str]] = ..., grade: _Optional[_Union[Grade, str]] = ..., memory_bytes: _Optional[int] = ..., mig_enabled: _Optional[bool] = ..., downgrades: _Optional[_Iterable[str]] = ...) -> None: ...

class Capacity(_message.Message):
    __slots__ = ("resources", "max_concurrency")
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    resources: Resources
    max_concurrency: int
    def __init__(self, resources: _Optional[_Union[Resources, _Mapping]] = ..., max_concurrency: _Optional[int] = ...) -> None: ...

class Share(_message.Message):
    __slots__ = ("occupant", "uj", "grade")
    OCCUPANT_FIELD_NUMBER: _ClassVar[int]
    UJ_FIELD_NUMBER: _ClassVar[int]
    GRADE_FIELD_NUMBER: _ClassVar[int]
    occupant: str
    uj: int
    grade: Grade
    def __init__(self, occupant: _Optional[str] = ..., uj: _Optional[int] = ..., grade: _Optional[_Union[Grade, str]] = ...) -> None: ...
