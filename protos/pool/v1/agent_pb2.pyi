from protos.pool.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RegisterRequest(_message.Message):
    __slots__ = ("host_id", "capacity", "devices", "agent_version", "window_ns")
    HOST_ID_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    WINDOW_NS_FIELD_NUMBER: _ClassVar[int]
    host_id: str
    capacity: _types_pb2.Capacity
    devices: _containers.RepeatedCompositeFieldContainer[_types_pb2.DeviceMeter]
    agent_version: str
    window_ns: int
    def __init__(self, host_id: _Optional[str] = ..., capacity: _Optional[_Union[_types_pb2.Capacity, _Mapping]] = ..., devices: _Optional[_Iterable[_Union[_types_pb2.DeviceMeter, _Mapping]]] = ..., agent_version: _Optional[str] = ..., window_ns: _Optional[int] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("acked_seq", "capacity")
    ACKED_SEQ_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    acked_seq: int
    capacity: _types_pb2.Capacity
    def __init__(self, acked_seq: _Optional[int] = ..., capacity: _Optional[_Union[_types_pb2.Capacity, _Mapping]] = ...) -> None: ...

class Window(_message.Message):
    __slots__ = ("device_id", "seq", "start_ns", "end_ns", "uj", "grade", "mean_uw", "shares", "occupancy_version", "gap_reason", "lost_windows")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    UJ_FIELD_NUMBER: _ClassVar[int]
    GRADE_FIELD_NUMBER: _ClassVar[int]
    MEAN_UW_FIELD_NUMBER: _ClassVar[int]
    SHARES_FIELD_NUMBER: _ClassVar[int]
    OCCUPANCY_VERSION_FIELD_NUMBER: _ClassVar[int]
    GAP_REASON_FIELD_NUMBER: _ClassVar[int]
    LOST_WINDOWS_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    seq: int
    start_ns: int
    end_ns: int
    uj: int
    grade: _types_pb2.Grade
    mean_uw: int
    shares: _containers.RepeatedCompositeFieldContainer[_types_pb2.Share]
    occupancy_version: int
    gap_reason: _types_pb2.GapReason
    lost_windows: int
    def __init__(self, device_id: _Optional[str] = ..., seq: _Optional[int] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ..., uj: _Optional[int] = ..., grade: _Optional[_Union[_types_pb2.Grade, str]] = ..., mean_uw: _Optional[int] = ..., shares: _Optional[_Iterable[_Union[_types_pb2.Share, _Mapping]]] = ..., occupancy_version: _Optional[int] = ..., gap_reason: _Optional[_Union[_types_pb2.GapReason, str]] = ..., lost_windows: _Optional[int] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("host_id",)
    HOST_ID_FIELD_NUMBER: _ClassVar[int]
    host_id: str
    def __init__(self, host_id: _Optional[str] = ...) -> None: ...

class WindowBatch(_message.Message):
    __slots__ = ("windows",)
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    windows: _containers.RepeatedCompositeFieldContainer[Window]
    def __init__(self, windows: _Optional[_Iterable[_Union[Window, _Mapping]]] = ...) -> None: ...

class AgentMessage(_message.Message):
    __slots__ = ("hello", "batch")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    batch: WindowBatch
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., batch: _Optional[_Union[WindowBatch, _Mapping]] = ...) -> None: ...

class DeviceOccupancy(_message.Message):
    __slots__ = ("device_id", "capacity", "occupants")
    class OccupantsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    OCCUPANTS_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    capacity: int
    occupants: _containers.ScalarMap[str, int]
    def __init__(self, device_id: _Optional[str] = ..., capacity: _Optional[int] = ..., occupants: _Optional[_Mapping[str, int]] = ...) -> None: ...

class Occupancy(_message.Message):
    __slots__ = ("version", "devices")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    version: int
    devices: _containers.RepeatedCompositeFieldContainer[DeviceOccupancy]
    def __init__(self, version: _Optional[int] = ..., devices: _Optional[_Iterable[_Union[DeviceOccupancy, _Mapping]]] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("acked_seq",)
    ACKED_SEQ_FIELD_NUMBER: _ClassVar[int]
    acked_seq: int
    def __init__(self, acked_seq: _Optional[int] = ...) -> None: ...

class SchedulerMessage(_message.Message):
    __slots__ = ("ack", "occupancy")
    ACK_FIELD_NUMBER: _ClassVar[int]
    OCCUPANCY_FIELD_NUMBER: _ClassVar[int]
    ack: Ack
    occupancy: Occupancy
    def __init__(self, ack: _Optional[_Union[Ack, _Mapping]] = ..., occupancy: _Optional[_Union[Occupancy, _Mapping]] = ...) -> None: ...
