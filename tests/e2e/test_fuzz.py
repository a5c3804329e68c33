"""No UNKNOWN status, ever (issue 21 item 7): malformed bytes to every RPC of
the authorization table, over mutual TLS through a raw channel with identity
serializers: truncated messages, 200,000-deep nesting, strings that are not
UTF-8, and every field at its type's edges (each message within the 4 MiB a default
client may send). Every answer is OK or a refusal with a stable code
(`CODE: sentence`; grpc.health.v1 answers with its protocol's own codes),
never UNKNOWN, INTERNAL or CANCELLED; and a refused call leaves the ledger as
it was."""

from __future__ import annotations

import functools
import importlib
import pkgutil

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import FieldDescriptor as F
from grpc_health.v1 import health_pb2  # noqa: F401 - registers grpc.health.v1 in the default pool

import protos.pool.v1
from protos.pool.v1 import claims_pb2, ops_pb2, types_pb2
from scheduler.service.authz import TABLE

for _module in pkgutil.iter_modules(protos.pool.v1.__path__):   # every pool.v1 service, in the default pool
    if _module.name.endswith("_pb2"):
        importlib.import_module(f"protos.pool.v1.{_module.name}")
CODES = set(types_pb2.ErrorCode.keys())
NEVER = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.CANCELLED}
DEPTH = 200_000

EDGES = {
    F.TYPE_INT32: (-(1 << 31), (1 << 31) - 1), F.TYPE_SINT32: (-(1 << 31), (1 << 31) - 1),
    F.TYPE_SFIXED32: (-(1 << 31), (1 << 31) - 1), F.TYPE_INT64: (-(1 << 63), (1 << 63) - 1),
    F.TYPE_SINT64: (-(1 << 63), (1 << 63) - 1), F.TYPE_SFIXED64: (-(1 << 63), (1 << 63) - 1),
    F.TYPE_UINT32: (0, (1 << 32) - 1), F.TYPE_FIXED32: (0, (1 << 32) - 1),
    F.TYPE_UINT64: (0, (1 << 64) - 1), F.TYPE_FIXED64: (0, (1 << 64) - 1),
    F.TYPE_BOOL: (True,), F.TYPE_DOUBLE: (float("inf"), float("nan")), F.TYPE_FLOAT: (float("-inf"),),
    F.TYPE_ENUM: ((1 << 31) - 1, -1),
    F.TYPE_STRING: ("", "\x00", "x" * 100_000, "é" * 200),
    F.TYPE_BYTES: (b"", b"\xff" * 100_000),
}


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


@functools.cache   # the same two messages for every method: built once (~0.4 s each)
def nested(depth: int, field: int = 1) -> bytes:
    """`depth` length-delimited fields, each holding the next (built inside out, in linear time)."""
    tag = varint(field << 3 | 2)
    heads, inner = [], 0
    for _ in range(depth):
        head = tag + varint(inner)
        heads.append(head)
        inner += len(head)
    return b"".join(reversed(heads))


def edge_messages(descriptor) -> list[bytes]:
    """One message per field and edge value (others default), and one with every scalar field at its last edge."""
    cls = message_factory.GetMessageClass(descriptor)
    out, every = [], cls()
    for field in descriptor.fields:
        if field.type == F.TYPE_MESSAGE:
            sub = message_factory.GetMessageClass(field.message_type)
            for inner in edge_messages(field.message_type)[:8]:
                message = cls()
                value = sub.FromString(inner)
                if field.is_repeated:
                    if field.message_type.GetOptions().map_entry:
                        continue
                    getattr(message, field.name).extend([value] * 3)
                else:
                    getattr(message, field.name).CopyFrom(value)
                out.append(message.SerializeToString())
            continue
        for value in EDGES.get(field.type, ()):
            message = cls()
            if field.is_repeated:
                getattr(message, field.name).extend([value] * (1_000 if not isinstance(value, (str, bytes))
                                                               or len(value) < 1000 else 2))
            else:
                setattr(message, field.name, value)
            out.append(message.SerializeToString())
        if not field.is_repeated and EDGES.get(field.type) and field.containing_oneof is None:
            setattr(every, field.name, EDGES[field.type][-1])
    out.append(every.SerializeToString())
    return out


def not_utf8(descriptor) -> list[bytes]:
    return [varint(f.number << 3 | 2) + varint(2) + b"\xff\xfe" for f in descriptor.fields
            if f.type == F.TYPE_STRING][:3]


def cases(descriptor) -> list[tuple[str, bytes]]:
    full = edge_messages(descriptor)[-1]
    cut = sorted({1, 2, len(full) // 3, len(full) // 2, len(full) - 1} - {0})
    return ([("truncated", full[:n]) for n in cut if n < len(full)]
            + [("deep", nested(DEPTH)), ("deep in field 2", nested(DEPTH, 2)), ("garbage", b"\xff" * 64)]
            + [("not utf-8", raw) for raw in not_utf8(descriptor)]
            + [("edge", raw) for raw in edge_messages(descriptor)])


def call(channel: grpc.Channel, method: str, raw: bytes) -> grpc.RpcError | None:
    """The call's refusal, or None once it is answered: a stream that sends a
    first message has accepted the request (it is cancelled there, not read to
    its end or its deadline)."""
    found = descriptor_pool.Default().FindMethodByName(method.lstrip("/").replace("/", "."))
    try:
        if found.client_streaming:
            stream = channel.stream_stream(method)(iter([raw]), timeout=3)
        elif found.server_streaming:
            stream = channel.unary_stream(method)(raw, timeout=3)
        else:
            channel.unary_unary(method)(raw, timeout=10)
            return None
        for _ in stream:
            stream.cancel()
            break
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.CANCELLED and stream.cancelled():
            return None   # we cancelled it after its first message
        return error
    return None


def length(s) -> int:
    return s.ops.LedgerHead(ops_pb2.LedgerHeadRequest(), timeout=10).length


@pytest.mark.parametrize("caller", ["operator", "w1", "alpha"])
def test_malformed_bytes_to_every_rpc_never_answer_unknown_and_refusals_leave_no_receipt(cluster, caller):
    s = cluster()
    s.register("w1")
    s.claims.Submit(claims_pb2.SubmitRequest(claim_id="c1", tenant="alpha", estimate_uj=1), timeout=10)
    channel = s.as_principal(caller).channel
    bad = []
    for method in TABLE:
        descriptor = descriptor_pool.Default().FindMethodByName(method.lstrip("/").replace("/", ".")).input_type
        for what, raw in cases(descriptor):
            before = length(s)
            error = call(channel, method, raw)
            if error is None or error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                continue   # answered (or a stream still open): it may have made receipts
            code = (error.details() or "").split(":", 1)[0]
            if error.code() in NEVER or (code not in CODES and not method.startswith("/grpc.health")):
                bad.append((method, what, error.code(), (error.details() or "")[:200]))
            elif length(s) != before:
                bad.append((method, what, "a refusal left a receipt", error.details()[:200]))
    assert s.serving()
    assert not bad, "\n".join(map(str, bad[:30]))
