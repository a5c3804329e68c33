from protos.pool.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CheckStep(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHECK_STEP_UNSPECIFIED: _ClassVar[CheckStep]
    VALIDATE: _ClassVar[CheckStep]
    GANG_COMPLETE: _ClassVar[CheckStep]
    DEVICES_ENTITLEMENT_CHECK: _ClassVar[CheckStep]
    ENERGY_OWN_PASS_CHECK: _ClassVar[CheckStep]
    ESTIMATOR_GRADE_CHECK: _ClassVar[CheckStep]
    ENERGY_SURPLUS_PASS_CHECK: _ClassVar[CheckStep]
    PLACEMENT_CHECK: _ClassVar[CheckStep]

class Tier(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TIER_UNSPECIFIED: _ClassVar[Tier]
    MEASURED: _ClassVar[Tier]
    UNMEASURED: _ClassVar[Tier]
CHECK_STEP_UNSPECIFIED: CheckStep
VALIDATE: CheckStep
GANG_COMPLETE: CheckStep
DEVICES_ENTITLEMENT_CHECK: CheckStep
ENERGY_OWN_PASS_CHECK: CheckStep
ESTIMATOR_GRADE_CHECK: CheckStep
ENERGY_SURPLUS_PASS_CHECK: CheckStep
PLACEMENT_CHECK: CheckStep
TIER_UNSPECIFIED: Tier
MEASURED: Tier
UNMEASURED: Tier

class CordonRequest(_message.Message):
    __slots__ = ("worker", "cordoned")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    CORDONED_FIELD_NUMBER: _ClassVar[int]
    worker: str
    cordoned: bool
    def __init__(self, worker: _Optional[str] = ..., cordoned: _Optional[bool] = ...) -> None: ...

class GpuFree(_message.Message):
    __slots__ = ("device_id", "device_type", "used_mdev", "free_mdev")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TYPE_FIELD_NUMBER: _ClassVar[int]
    USED_MDEV_FIELD_NUMBER: _ClassVar[int]
    FREE_MDEV_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    device_type: str
    used_mdev: int
    free_mdev: int
    def __init__(self, device_id: _Optional[str] = ..., device_type: _Optional[str] = ..., used_mdev: _Optional[int] = ..., free_mdev: _Optional[int] = ...) -> None: ...

class TenantsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TenantNode(_message.Message):
    __slots__ = ("name", "parent", "weight", "guarantee_uj", "guarantee_mdev", "borrow_limit_uj", "lend_limit_uj", "usage_uj", "usage_mdev", "borrowed_uj", "measured_uj", "measured_grade")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    GUARANTEE_UJ_FIELD_NUMBER: _ClassVar[int]
    GUARANTEE_MDEV_FIELD_NUMBER: _ClassVar[int]
    BORROW_LIMIT_UJ_FIELD_NUMBER: _ClassVar[int]
    LEND_LIMIT_UJ_FIELD_NUMBER: _ClassVar[int]
    USAGE_UJ_FIELD_NUMBER: _ClassVar[int]
    USAGE_MDEV_FIELD_NUMBER: _ClassVar[int]
    BORROWED_UJ_FIELD_NUMBER: _ClassVar[int]
    MEASURED_UJ_FIELD_NUMBER: _ClassVar[int]
    MEASURED_GRADE_FIELD_NUMBER: _ClassVar[int]
    name: str
    parent: str
    weight: int
    guarantee_uj: int
    guarantee_mdev: int
    borrow_limit_uj: int
    lend_limit_uj: int
    usage_uj: int
    usage_mdev: int
    borrowed_uj: int
    measured_uj: int
    measured_grade: _types_pb2.Grade
    def __init__(self, name: _Optional[str] = ..., parent: _Optional[str] = ..., weight: _Optional[int] = ..., guarantee_uj: _Optional[int] = ..., guarantee_mdev: _Optional[int] = ..., borrow_limit_uj: _Optional[int] = ..., lend_limit_uj: _Optional[int] = ..., usage_uj: _Optional[int] = ..., usage_mdev: _Optional[int] = ..., borrowed_uj: _Optional[int] = ..., measured_uj: _Optional[int] = ..., measured_grade: _Optional[_Union[_types_pb2.Grade, str]] = ...) -> None: ...

class TenantsResponse(_message.Message):
    __slots__ = ("tenants", "period_start_ns", "period_ns")
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    PERIOD_START_NS_FIELD_NUMBER: _ClassVar[int]
    PERIOD_NS_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[TenantNode]
    period_start_ns: int
    period_ns: int
    def __init__(self, tenants: _Optional[_Iterable[_Union[TenantNode, _Mapping]]] = ..., period_start_ns: _Optional[int] = ..., period_ns: _Optional[int] = ...) -> None: ...

class WorkersRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class WorkerStatus(_message.Message):
    __slots__ = ("worker", "capacity", "reserved", "available", "active_claims", "live", "devices", "exclusive", "cordoned", "gpus", "active_claims_omitted")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_CLAIMS_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    CORDONED_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_CLAIMS_OMITTED_FIELD_NUMBER: _ClassVar[int]
    worker: str
    capacity: _types_pb2.Capacity
    reserved: _types_pb2.Resources
    available: _types_pb2.Resources
    active_claims: _containers.RepeatedScalarFieldContainer[str]
    live: bool
    devices: _containers.RepeatedCompositeFieldContainer[_types_pb2.DeviceMeter]
    exclusive: bool
    cordoned: bool
    gpus: _containers.RepeatedCompositeFieldContainer[GpuFree]
    active_claims_omitted: int
    def __init__(self, worker: _Optional[str] = ..., capacity: _Optional[_Union[_types_pb2.Capacity, _Mapping]] = ..., reserved: _Optional[_Union[_types_pb2.Resources, _Mapping]] = ..., available: _Optional[_Union[_types_pb2.Resources, _Mapping]] = ..., active_claims: _Optional[_Iterable[str]] = ..., live: _Optional[bool] = ..., devices: _Optional[_Iterable[_Union[_types_pb2.DeviceMeter, _Mapping]]] = ..., exclusive: _Optional[bool] = ..., cordoned: _Optional[bool] = ..., gpus: _Optional[_Iterable[_Union[GpuFree, _Mapping]]] = ..., active_claims_omitted: _Optional[int] = ...) -> None: ...

class WorkersResponse(_message.Message):
    __slots__ = ("workers", "next_page_token")
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerStatus]
    next_page_token: str
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerStatus, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ExplainRequest(_message.Message):
    __slots__ = ("claim_id", "tenant")
    CLAIM_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    claim_id: str
    tenant: str
    def __init__(self, claim_id: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class EntitlementCheck(_message.Message):
    __slots__ = ("step", "ok", "evaluated", "node", "guarantee", "usage", "hold", "surplus", "limit", "grade", "detail", "reason")
    STEP_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    EVALUATED_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    GUARANTEE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    SURPLUS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    GRADE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    step: CheckStep
    ok: bool
    evaluated: bool
    node: str
    guarantee: int
    usage: int
    hold: int
    surplus: int
    limit: int
    grade: _types_pb2.Grade
    detail: str
    reason: _types_pb2.Reason
    def __init__(self, step: _Optional[_Union[CheckStep, str]] = ..., ok: _Optional[bool] = ..., evaluated: _Optional[bool] = ..., node: _Optional[str] = ..., guarantee: _Optional[int] = ..., usage: _Optional[int] = ..., hold: _Optional[int] = ..., surplus: _Optional[int] = ..., limit: _Optional[int] = ..., grade: _Optional[_Union[_types_pb2.Grade, str]] = ..., detail: _Optional[str] = ..., reason: _Optional[_Union[_types_pb2.Reason, str]] = ...) -> None: ...

class FieldFigure(_message.Message):
    __slots__ = ("field", "requested", "capacity", "reserved", "available_before", "available_after", "shortfall")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_BEFORE_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_AFTER_FIELD_NUMBER: _ClassVar[int]
    SHORTFALL_FIELD_NUMBER: _ClassVar[int]
    field: str
    requested: int
    capacity: int
    reserved: int
    available_before: int
    available_after: int
    shortfall: int
    def __init__(self, field: _Optional[str] = ..., requested: _Optional[int] = ..., capacity: _Optional[int] = ..., reserved: _Optional[int] = ..., available_before: _Optional[int] = ..., available_after: _Optional[int] = ..., shortfall: _Optional[int] = ...) -> None: ...

class WorkerExplanation(_message.Message):
    __slots__ = ("worker", "ok", "reason", "fields", "gpu_types", "detail")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPES_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    worker: str
    ok: bool
    reason: _types_pb2.Reason
    fields: _containers.RepeatedCompositeFieldContainer[FieldFigure]
    gpu_types: _containers.RepeatedScalarFieldContainer[str]
    detail: str
    def __init__(self, worker: _Optional[str] = ..., ok: _Optional[bool] = ..., reason: _Optional[_Union[_types_pb2.Reason, str]] = ..., fields: _Optional[_Iterable[_Union[FieldFigure, _Mapping]]] = ..., gpu_types: _Optional[_Iterable[str]] = ..., detail: _Optional[str] = ...) -> None: ...

class Explanation(_message.Message):
    __slots__ = ("claim_id", "tenant", "state", "reason", "checks", "workers", "queue_position", "worker", "devices_mdev", "gang_member", "workers_omitted", "gpu_types", "bound")
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
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    DEVICES_MDEV_FIELD_NUMBER: _ClassVar[int]
    GANG_MEMBER_FIELD_NUMBER: _ClassVar[int]
    WORKERS_OMITTED_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPES_FIELD_NUMBER: _ClassVar[int]
    BOUND_FIELD_NUMBER: _ClassVar[int]
    claim_id: str
    tenant: str
    state: _types_pb2.ClaimState
    reason: _types_pb2.Reason
    checks: _containers.RepeatedCompositeFieldContainer[EntitlementCheck]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerExplanation]
    queue_position: int
    worker: str
    devices_mdev: _containers.ScalarMap[str, int]
    gang_member: str
    workers_omitted: int
    gpu_types: _containers.RepeatedScalarFieldContainer[str]
    bound: bool
    def __init__(self, claim_id: _Optional[str] = ..., tenant: _Optional[str] = ..., state: _Optional[_Union[_types_pb2.ClaimState, str]] = ..., reason: _Optional[_Union[_types_pb2.Reason, str]] = ..., checks: _Optional[_Iterable[_Union[EntitlementCheck, _Mapping]]] = ..., workers: _Optional[_Iterable[_Union[WorkerExplanation, _Mapping]]] = ..., queue_position: _Optional[int] = ..., worker: _Optional[str] = ..., devices_mdev: _Optional[_Mapping[str, int]] = ..., gang_member: _Optional[str] = ..., workers_omitted: _Optional[int] = ..., gpu_types: _Optional[_Iterable[str]] = ..., bound: _Optional[bool] = ...) -> None: ...

class SplitsRequest(_message.Message):
    __slots__ = ("tenant", "since_ns", "device_id", "page_size", "page_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SINCE_NS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    since_ns: int
    device_id: str
    page_size: int
    page_token: str
    def __init__(self, tenant: _Optional[str] = ..., since_ns: _Optional[int] = ..., device_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class SplitRow(_message.Message):
    __slots__ = ("tenant", "claim_id", "worker", "device_id", "start_ns", "end_ns", "uj", "grade")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CLAIM_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    UJ_FIELD_NUMBER: _ClassVar[int]
    GRADE_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    claim_id: str
    worker: str
    device_id: str
    start_ns: int
    end_ns: int
    uj: int
    grade: _types_pb2.Grade
    def __init__(self, tenant: _Optional[str] = ..., claim_id: _Optional[str] = ..., worker: _Optional[str] = ..., device_id: _Optional[str] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ..., uj: _Optional[int] = ..., grade: _Optional[_Union[_types_pb2.Grade, str]] = ...) -> None: ...

class TenantTotal(_message.Message):
    __slots__ = ("tenant", "uj", "grade", "unaccounted_ns")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    UJ_FIELD_NUMBER: _ClassVar[int]
    GRADE_FIELD_NUMBER: _ClassVar[int]
    UNACCOUNTED_NS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    uj: int
    grade: _types_pb2.Grade
    unaccounted_ns: int
    def __init__(self, tenant: _Optional[str] = ..., uj: _Optional[int] = ..., grade: _Optional[_Union[_types_pb2.Grade, str]] = ..., unaccounted_ns: _Optional[int] = ...) -> None: ...

class DeviceTotal(_message.Message):
    __slots__ = ("worker", "device_id", "uj", "grade", "unaccounted_ns", "lost_windows")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    UJ_FIELD_NUMBER: _ClassVar[int]
    GRADE_FIELD_NUMBER: _ClassVar[int]
    UNACCOUNTED_NS_FIELD_NUMBER: _ClassVar[int]
    LOST_WINDOWS_FIELD_NUMBER: _ClassVar[int]
    worker: str
    device_id: str
    uj: int
    grade: _types_pb2.Grade
    unaccounted_ns: int
    lost_windows: int
    def __init__(self, worker: _Optional[str] = ..., device_id: _Optional[str] = ..., uj: _Optional[int] = ..., grade: _Optional[_Union[_types_pb2.Grade, str]] = ..., unaccounted_ns: _Optional[int] = ..., lost_windows: _Optional[int] = ...) -> None: ...

class Gap(_message.Message):
    __slots__ = ("worker", "device_id", "start_ns", "end_ns", "reason", "lost_windows")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LOST_WINDOWS_FIELD_NUMBER: _ClassVar[int]
    worker: str
    device_id: str
    start_ns: int
    end_ns: int
    reason: _types_pb2.GapReason
    lost_windows: int
    def __init__(self, worker: _Optional[str] = ..., device_id: _Optional[str] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ..., reason: _Optional[_Union[_types_pb2.GapReason, str]] = ..., lost_windows: _Optional[int] = ...) -> None: ...

class SplitsResponse(_message.Message):
    __slots__ = ("rows", "totals", "devices", "gaps", "next_page_token")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    TOTALS_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    GAPS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[SplitRow]
    totals: _containers.RepeatedCompositeFieldContainer[TenantTotal]
    devices: _containers.RepeatedCompositeFieldContainer[DeviceTotal]
    gaps: _containers.RepeatedCompositeFieldContainer[Gap]
    next_page_token: str
    def __init__(self, rows: _Optional[_Iterable[_Union[SplitRow, _Mapping]]] = ..., totals: _Optional[_Iterable[_Union[TenantTotal, _Mapping]]] = ..., devices: _Optional[_Iterable[_Union[DeviceTotal, _Mapping]]] = ..., gaps: _Optional[_Iterable[_Union[Gap, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class PreemptionOrderRequest(_message.Message):
    __slots__ = ("for_claim_id", "for_tenant", "page_size", "page_token")
    FOR_CLAIM_ID_FIELD_NUMBER: _ClassVar[int]
    FOR_TENANT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    for_claim_id: str
    for_tenant: str
    page_size: int
    page_token: str
    def __init__(self, for_claim_id: _Optional[str] = ..., for_tenant: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class Victim(_message.Message):
    __slots__ = ("claim_id", "tenant", "tier", "measured_uj", "completed_units", "priority", "admitted_seq")
    CLAIM_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    MEASURED_UJ_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_UNITS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_SEQ_FIELD_NUMBER: _ClassVar[int]
    claim_id: str
    tenant: str
    tier: Tier
    measured_uj: int
    completed_units: int
    priority: int
    admitted_seq: int
    def __init__(self, claim_id: _Optional[str] = ..., tenant: _Optional[str] = ..., tier: _Optional[_Union[Tier, str]] = ..., measured_uj: _Optional[int] = ..., completed_units: _Optional[int] = ..., priority: _Optional[int] = ..., admitted_seq: _Optional[int] = ...) -> None: ...

class PreemptionOrderResponse(_message.Message):
    __slots__ = ("order", "victims", "reason", "next_page_token")
    ORDER_FIELD_NUMBER: _ClassVar[int]
    VICTIMS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    order: _containers.RepeatedCompositeFieldContainer[Victim]
    victims: _containers.RepeatedScalarFieldContainer[str]
    reason: _types_pb2.Reason
    next_page_token: str
    def __init__(self, order: _Optional[_Iterable[_Union[Victim, _Mapping]]] = ..., victims: _Optional[_Iterable[str]] = ..., reason: _Optional[_Union[_types_pb2.Reason, str]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ReclamationOrderRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ClaimVerdict(_message.Message):
    __slots__ = ("claim_id", "tenant", "verdict", "mean_uw", "grade", "threshold_uw", "held_mdev", "observed_ns")
    CLAIM_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    MEAN_UW_FIELD_NUMBER: _ClassVar[int]
    GRADE_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_UW_FIELD_NUMBER: _ClassVar[int]
    HELD_MDEV_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_NS_FIELD_NUMBER: _ClassVar[int]
    claim_id: str
    tenant: str
    verdict: _types_pb2.IdleVerdict
    mean_uw: int
    grade: _types_pb2.Grade
    threshold_uw: int
    held_mdev: int
    observed_ns: int
    def __init__(self, claim_id: _Optional[str] = ..., tenant: _Optional[str] = ..., verdict: _Optional[_Union[_types_pb2.IdleVerdict, str]] = ..., mean_uw: _Optional[int] = ..., grade: _Optional[_Union[_types_pb2.Grade, str]] = ..., threshold_uw: _Optional[int] = ..., held_mdev: _Optional[int] = ..., observed_ns: _Optional[int] = ...) -> None: ...

class ReclamationOrderResponse(_message.Message):
    __slots__ = ("verdicts", "order", "window_ns", "next_page_token")
    VERDICTS_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    WINDOW_NS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    verdicts: _containers.RepeatedCompositeFieldContainer[ClaimVerdict]
    order: _containers.RepeatedScalarFieldContainer[str]
    window_ns: int
    next_page_token: str
    def __init__(self, verdicts: _Optional[_Iterable[_Union[ClaimVerdict, _Mapping]]] = ..., order: _Optional[_Iterable[str]] = ..., window_ns: _Optional[int] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ReclaimRequest(_message.Message):
    __slots__ = ("claim_ids",)
    CLAIM_IDS_FIELD_NUMBER: _ClassVar[int]
    claim_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, claim_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ReclaimResponse(_message.Message):
    __slots__ = ("reclaimed",)
    RECLAIMED_FIELD_NUMBER: _ClassVar[int]
    reclaimed: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, reclaimed: _Optional[_Iterable[str]] = ...) -> None: ...

class EstimateRequest(_message.Message):
    __slots__ = ("work_class",)
    WORK_CLASS_FIELD_NUMBER: _ClassVar[int]
    work_class: str
    def __init__(self, work_class: _Optional[str] = ...) -> None: ...

class EstimateResponse(_message.Message):
    __slots__ = ("work_class", "estimate_uj", "grade", "observations", "excluded_estimator", "eligible", "required")
    WORK_CLASS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_UJ_FIELD_NUMBER: _ClassVar[int]
    GRADE_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    EXCLUDED_ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    ELIGIBLE_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    work_class: str
    estimate_uj: int
    grade: _types_pb2.Grade
    observations: int
    excluded_estimator: int
    eligible: int
    required: int
    def __init__(self, work_class: _Optional[str] = ..., estimate_uj: _Optional[int] = ..., grade: _Optional[_Union[_types_pb2.Grade, str]] = ..., observations: _Optional[int] = ..., excluded_estimator: _Optional[int] = ..., eligible: _Optional[int] = ..., required: _Optional[int] = ...) -> None: ...

class LedgerHeadRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LedgerInfo(_message.Message):
    __slots__ = ("ledger_id", "length", "head", "steward_key_id", "witnessed_length")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    HEAD_FIELD_NUMBER: _ClassVar[int]
    STEWARD_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    WITNESSED_LENGTH_FIELD_NUMBER: _ClassVar[int]
    ledger_id: bytes
    length: int
    head: bytes
    steward_key_id: bytes
    witnessed_length: int
    def __init__(self, ledger_id: _Optional[bytes] = ..., length: _Optional[int] = ..., head: _Optional[bytes] = ..., steward_key_id: _Optional[bytes] = ..., witnessed_length: _Optional[int] = ...) -> None: ...

class LedgerExportRequest(_message.Message):
    __slots__ = ("from_seq",)
    FROM_SEQ_FIELD_NUMBER: _ClassVar[int]
    from_seq: int
    def __init__(self, from_seq: _Optional[int] = ...) -> None: ...

class LedgerChunk(_message.Message):
    __slots__ = ("receipts",)
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    receipts: bytes
    def __init__(self, receipts: _Optional[bytes] = ...) -> None: ...

class RecordWitnessRequest(_message.Message):
    __slots__ = ("witness_receipt",)
    WITNESS_RECEIPT_FIELD_NUMBER: _ClassVar[int]
    witness_receipt: bytes
    def __init__(self, witness_receipt: _Optional[bytes] = ...) -> None: ...
