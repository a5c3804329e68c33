from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetCheckpointRequest(_message.Message):
    __slots__ = ("old_size",)
    OLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    old_size: int
    def __init__(self, old_size: _Optional[int] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("note", "old_size", "consistency")
    NOTE_FIELD_NUMBER: _ClassVar[int]
    OLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    note: bytes
    old_size: int
    consistency: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, note: _Optional[bytes] = ..., old_size: _Optional[int] = ..., consistency: _Optional[_Iterable[bytes]] = ...) -> None: ...

class AddCosignatureRequest(_message.Message):
    __slots__ = ("note",)
    NOTE_FIELD_NUMBER: _ClassVar[int]
    note: bytes
    def __init__(self, note: _Optional[bytes] = ...) -> None: ...

class ProveClaimRequest(_message.Message):
    __slots__ = ("claim_id", "tenant", "since_size")
    CLAIM_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SINCE_SIZE_FIELD_NUMBER: _ClassVar[int]
    claim_id: str
    tenant: str
    since_size: int
    def __init__(self, claim_id: _Optional[str] = ..., tenant: _Optional[str] = ..., since_size: _Optional[int] = ...) -> None: ...

class ProvenReceipt(_message.Message):
    __slots__ = ("seq", "receipt", "path")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    seq: int
    receipt: bytes
    path: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, seq: _Optional[int] = ..., receipt: _Optional[bytes] = ..., path: _Optional[_Iterable[bytes]] = ...) -> None: ...

class ClaimProof(_message.Message):
    __slots__ = ("claim_id", "checkpoint", "steward_key", "receipts", "pending", "since_size", "consistency")
    CLAIM_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    STEWARD_KEY_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    SINCE_SIZE_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    claim_id: str
    checkpoint: bytes
    steward_key: bytes
    receipts: _containers.RepeatedCompositeFieldContainer[ProvenReceipt]
    pending: _containers.RepeatedScalarFieldContainer[int]
    since_size: int
    consistency: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, claim_id: _Optional[str] = ..., checkpoint: _Optional[bytes] = ..., steward_key: _Optional[bytes] = ..., receipts: _Optional[_Iterable[_Union[ProvenReceipt, _Mapping]]] = ..., pending: _Optional[_Iterable[int]] = ..., since_size: _Optional[int] = ..., consistency: _Optional[_Iterable[bytes]] = ...) -> None: ...

class ProveSubtreeRequest(_message.Message):
    __slots__ = ("tenant", "since_ns", "until_ns", "since_size")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SINCE_NS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_NS_FIELD_NUMBER: _ClassVar[int]
    SINCE_SIZE_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    since_ns: int
    until_ns: int
    since_size: int
    def __init__(self, tenant: _Optional[str] = ..., since_ns: _Optional[int] = ..., until_ns: _Optional[int] = ..., since_size: _Optional[int] = ...) -> None: ...

class SubtreeProof(_message.Message):
    __slots__ = ("tenant", "claims")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    claims: _containers.RepeatedCompositeFieldContainer[ClaimProof]
    def __init__(self, tenant: _Optional[str] = ..., claims: _Optional[_Iterable[_Union[ClaimProof, _Mapping]]] = ...) -> None: ...
