from protos.pool.v1 import types_pb2 as _types_pb2
from protos.pool.v1 import ops_pb2 as _ops_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ClaimEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLAIM_EVENT_KIND_UNSPECIFIED: _ClassVar[ClaimEventKind]
    EVENT_CURRENT: _ClassVar[ClaimEventKind]
    EVENT_SUBMITTED: _ClassVar[ClaimEventKind]
    EVENT_ADMITTED: _ClassVar[ClaimEventKind]
    EVENT_PROGRESS: _ClassVar[ClaimEventKind]
    EVENT_RELEASED: _ClassVar[ClaimEventKind]
    EVENT_PREEMPTED: _ClassVar[ClaimEventKind]
    EVENT_RECLAIMED: _ClassVar[ClaimEventKind]
    EVENT_REFUSED: _ClassVar[ClaimEventKind]
CLAIM_EVENT_KIND_UNSPECIFIED: ClaimEventKind
EVENT_CURRENT: ClaimEventKind
EVENT_SUBMITTED: ClaimEventKind
EVENT_ADMITTED: ClaimEventKind
EVENT_PROGRESS: ClaimEventKind
EVENT_RELEASED: ClaimEventKind
EVENT_PREEMPTED: ClaimEventKind
EVENT_RECLAIMED: ClaimEventKind
EVENT_REFUSED: ClaimEventKind

class BindRequest(_message.Message):
    __slots__ = ("claim_id", "tenant", "device_ids", "dry_run")
    CLAIM_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    DEVICE_IDS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    claim_id: str
    tenant: str
    device_ids: _containers.RepeatedScalarFieldContainer[str]
    dry_run: bool
    def __init__(self, claim_id: _Optional[str] = ..., tenant: _Optional[str] = ..., device_ids: _Optional[_Iterable[str]] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class SubmitRequest(_message.Message):
    __slots__ = ("claim_id", "tenant", "gang_id", "gang_size", "resources", "placement", "estimate_uj", "work_class", "priority")
    CLAIM_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    GANG_ID_FIELD_NUMBER: _ClassVar[int]
    GANG_SIZE_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_UJ_FIELD_NUMBER: _ClassVar[int]
    WORK_CLASS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    claim_id: str
    tenant: str
    gang_id: str
    gang_size: int
    resources: _types_pb2.Resources
    placement: _types_pb2.Placement
    estimate_uj: int
    work_class: str
    priority: int
    def __init__(self, claim_id: _Optional[str] = ..., tenant: _Optional[str] = ..., gang_id: _Optional[str] = ..., gang_size: _Optional[int] = ..., resources: _Optional[_Union[_types_pb2.Resources, _Mapping]] = ..., placement: _Optional[_Union[_types_pb2.Placement, str]] = ..., estimate_uj: _Optional[int] = ..., work_class: _Optional[str] = ..., priority: _Optional[int] = ...) -> None: ...

class SubmitManyRequest(_message.Message):
    __slots__ = ("claims",)
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.RepeatedCompositeFieldContainer[SubmitRequest]
    def __init__(self, claims: _Optional[_Iterable[_Union[SubmitRequest, _Mapping]]] = ...) -> None: ...

class SubmitManyResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SubmitResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SubmitResult, _Mapping]]] = ...) -> None: ...

class SubmitResult(_message.Message):
    __slots__ = ("status", "refused")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    status: ClaimStatus
    refused: Refusal
    def __init__(self, status: _Optional[_Union[ClaimStatus, _Mapping]] = ..., refused: _Optional[_Union[Refusal, _Mapping]] = ...) -> None: ...

class Refusal(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: _types_pb2.ErrorCode
    message: str
    def __init__(self, code: _Optional[_Union[_types_pb2.ErrorCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class ProgressRequest(_message.Message):
    __slots__ = ("claim_id", "tenant", "completed_units")
    CLAIM_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_UNITS_FIELD_NUMBER: _ClassVar[int]
    claim_id: str
    tenant: str
    completed_units: int
    def __init__(self, claim_id: _Optional[str] = ..., tenant: _Optional[str] = ..., completed_units: _Optional[int] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("claim_id", "tenant")
    CLAIM_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    claim_id: str
    tenant: str
    def __init__(self, claim_id: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class GetClaimRequest(_message.Message):
    __slots__ = ("claim_id", "tenant")
    CLAIM_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    claim_id: str
    tenant: str
    def __init__(self, claim_id: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class ListClaimsRequest(_message.Message):
    __slots__ = ("tenant", "states", "page_size", "page_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    states: _containers.RepeatedScalarFieldContainer[_types_pb2.ClaimState]
    page_size: int
    page_token: str
    def __init__(self, tenant: _Optional[str] = ..., states: _Optional[_Iterable[_Union[_types_pb2.ClaimState, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListClaimsResponse(_message.Message):
    __slots__ = ("claims", "next_page_token")
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.RepeatedCompositeFieldContainer[ClaimStatus]
    next_page_token: str
    def __init__(self, claims: _Optional[_Iterable[_Union[ClaimStatus, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("claim_id", "tenant", "resume_from", "from_now", "claim_tenant")
    CLAIM_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    RESUME_FROM_FIELD_NUMBER: _ClassVar[int]
    FROM_NOW_FIELD_NUMBER: _ClassVar[int]
    CLAIM_TENANT_FIELD_NUMBER: _ClassVar[int]
    claim_id: str
    tenant: str
    resume_from: int
    from_now: bool
    claim_tenant: str
    def __init__(self, claim_id: _Optional[str] = ..., tenant: _Optional[str] = ..., resume_from: _Optional[int] = ..., from_now: _Optional[bool] = ..., claim_tenant: _Optional[str] = ...) -> None: ...

class ClaimStatus(_message.Message):
    __slots__ = ("claim_id", "tenant", "state", "reason", "hold_uj", "hold_grade", "measured_uj", "measured_grade", "completed_units", "overrun", "worker", "devices_mdev", "ledger_seq", "gang_id", "priority", "borrowed", "request", "submitted_by", "released_by", "submitted_ns", "admitted_ns", "ended_ns", "queue_position", "borrowed_uj", "bound")
    class DevicesMdevEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CLAIM_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    HOLD_UJ_FIELD_NUMBER: _ClassVar[int]
    HOLD_GRADE_FIELD_NUMBER: _ClassVar[int]
    MEASURED_UJ_FIELD_NUMBER: _ClassVar[int]
    MEASURED_GRADE_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_UNITS_FIELD_NUMBER: _ClassVar[int]
    OVERRUN_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    DEVICES_MDEV_FIELD_NUMBER: _ClassVar[int]
    LEDGER_SEQ_FIELD_NUMBER: _ClassVar[int]
    GANG_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    BORROWED_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_BY_FIELD_NUMBER: _ClassVar[int]
    RELEASED_BY_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_NS_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_NS_FIELD_NUMBER: _ClassVar[int]
    ENDED_NS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    BORROWED_UJ_FIELD_NUMBER: _ClassVar[int]
    BOUND_FIELD_NUMBER: _ClassVar[int]
    claim_id: str
    tenant: str
    state: _types_pb2.ClaimState
    reason: _types_pb2.Reason
    hold_uj: int
    hold_grade: _types_pb2.Grade
    measured_uj: int
    measured_grade: _types_pb2.Grade
    completed_units: int
    overrun: bool
    worker: str
    devices_mdev: _containers.ScalarMap[str, int]
    ledger_seq: int
    gang_id: str
    priority: int
    borrowed: bool
    request: SubmitRequest
    submitted_by: str
    released_by: str
    submitted_ns: int
    admitted_ns: int
    ended_ns: int
    queue_position: int
    borrowed_uj: int
    bound: bool
    def __init__(self, claim_id: _Optional[str] = ..., tenant: _Optional[str] = ..., state: _Optional[_Union[_types_pb2.ClaimState, str]] = ..., reason: _Optional[_Union[_types_pb2.Reason, str]] = ..., hold_uj: _Optional[int] = ..., hold_grade: _Optional[_Union[_types_pb2.Grade, str]] = ..., measured_uj: _Optional[int] = ..., measured_grade: _Optional[_Union[_types_pb2.Grade, str]] = ..., completed_units: _Optional[int] = ..., overrun: _Optional[bool] = ..., worker: _Optional[str] = ..., devices_mdev: _Optional[_Mapping[str, int]] = ..., ledger_seq: _Optional[int] = ..., gang_id: _Optional[str] = ..., priority: _Optional[int] = ..., borrowed: _Optional[bool] = ..., request: _Optional[_Union[SubmitRequest, _Mapping]] = ..., submitted_by: _Optional[str] = ..., released_by: _Optional[str] = ..., submitted_ns: _Optional[int] = ..., admitted_ns: _Optional[int] = ..., ended_ns: _Optional[int] = ..., queue_position: _Optional[int] = ..., borrowed_uj: _Optional[int] = ..., bound: _Optional[bool] = ...) -> None: ...

class ClaimEvent(_message.Message):
    __slots__ = ("status", "time_ns", "kind", "position")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TIME_NS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    status: ClaimStatus
    time_ns: int
    kind: ClaimEventKind
    position: int
    def __init__(self, status: _Optional[_Union[ClaimStatus, _Mapping]] = ..., time_ns: _Optional[int] = ..., kind: _Optional[_Union[ClaimEventKind, str]] = ..., position: _Optional[int] = ...) -> None: ...

class PlanRequest(_message.Message):
    __slots__ = ("claims",)
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.RepeatedCompositeFieldContainer[SubmitRequest]
    def __init__(self, claims: _Optional[_Iterable[_Union[SubmitRequest, _Mapping]]] = ...) -> None: ...

class PlannedVictim(_message.Message):
    __slots__ = ("claim_id", "tenant", "for_claim", "why", "tier", "measured_uj", "completed_units", "priority")
    CLAIM_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    FOR_CLAIM_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    MEASURED_UJ_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_UNITS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    claim_id: str
    tenant: str
    for_claim: str
    why: str
    tier: _ops_pb2.Tier
    measured_uj: int
    completed_units: int
    priority: int
    def __init__(self, claim_id: _Optional[str] = ..., tenant: _Optional[str] = ..., for_claim: _Optional[str] = ..., why: _Optional[str] = ..., tier: _Optional[_Union[_ops_pb2.Tier, str]] = ..., measured_uj: _Optional[int] = ..., completed_units: _Optional[int] = ..., priority: _Optional[int] = ...) -> None: ...

class PlanResponse(_message.Message):
    __slots__ = ("claims", "victims", "explanations")
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    VICTIMS_FIELD_NUMBER: _ClassVar[int]
    EXPLANATIONS_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.RepeatedCompositeFieldContainer[ClaimStatus]
    victims: _containers.RepeatedCompositeFieldContainer[PlannedVictim]
    explanations: _containers.RepeatedCompositeFieldContainer[_ops_pb2.Explanation]
    def __init__(self, claims: _Optional[_Iterable[_Union[ClaimStatus, _Mapping]]] = ..., victims: _Optional[_Iterable[_Union[PlannedVictim, _Mapping]]] = ..., explanations: _Optional[_Iterable[_Union[_ops_pb2.Explanation, _Mapping]]] = ...) -> None: ...
