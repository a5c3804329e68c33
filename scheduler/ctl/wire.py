"""poolctl's side of the wire: the channel to the scheduler, its errors, and
protobuf messages turned into plain JSON documents.

proto3's own JSON mapping prints 64-bit integers as strings; operators read
µJ as numbers, so this does its own walk of the descriptor instead. Enums
have one spelling in every JSON poolctl prints: the value's name in the
.proto files (`ADMITTED`, `GRADE_HW_SHUNT`, `PLACEMENT_EXCLUSIVE`), as an
independent client built from them reads it, and null for the *_UNSPECIFIED
zero. Tables print grades as RULES names them (`HwShunt`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from protos.energy import Grade
from protos.failover import addresses
from protos.pool.v1 import types_pb2
from scheduler.ctl.failover import FailoverChannel
from scheduler.ctl.output import EXIT_FAILED, EXIT_USAGE, CtlError, add_output_flag

DEFAULT_SCHEDULER = "127.0.0.1:7070"
TIMEOUT_S = 30.0


def add_scheduler_flag(parser: Any, key_flag: str = "--key") -> None:
    """--scheduler, and the caller's mTLS files: --ca/--cert/--key or $POOL_CA/$POOL_CERT/$POOL_KEY
    (a verb whose --key means something else takes the client key as `key_flag`)."""
    parser.add_argument("--scheduler", default=os.environ.get("POOL_SCHEDULER", DEFAULT_SCHEDULER),
                        help="scheduler address, or a leader and its standbys as a comma-separated "
                             "list (default: $POOL_SCHEDULER or %(default)s)")
    for flag, dest, variable, what in (
            ("--ca", "ca", "POOL_CA", "the CA that signed the scheduler's certificate"),
            ("--cert", "cert", "POOL_CERT", "your client certificate (its CN is your principal)"),
            (key_flag, "client_key", "POOL_KEY", "your client certificate's key")):
        parser.add_argument(flag, dest=dest, default=os.environ.get(variable) or None, metavar="PEM",
                            help=f"{what} (default: ${variable}); without a CA: plaintext")


def online_verb(verbs: Any, name: str, help_text: str, run: Any) -> Any:
    """A sub-command that asks a running scheduler: --scheduler and -o."""
    p = verbs.add_parser(name, help=help_text)
    add_scheduler_flag(p)
    add_output_flag(p)
    p.set_defaults(run=run)
    return p


def credentials(ca: str | None, cert: str | None, key: str | None) -> grpc.ChannelCredentials | None:
    """mTLS channel credentials from PEM paths; None (plaintext) without a CA."""
    if not ca:
        if cert or key:
            raise CtlError("USAGE", "--cert/--key need --ca (or $POOL_CA) too", EXIT_USAGE)
        return None
    if bool(cert) != bool(key):
        raise CtlError("USAGE", "--cert and --key go together", EXIT_USAGE)
    try:
        return grpc.ssl_channel_credentials(_read(ca), _read(key) if key else None, _read(cert) if cert else None)
    except OSError as exc:
        raise CtlError("USAGE", f"{exc.filename}: {exc.strerror}", EXIT_USAGE) from None


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def channel(args: Any) -> grpc.Channel:
    """To the leader among the addresses given (scheduler/ctl/failover.py), over mTLS with the
    caller's files (plaintext without a CA)."""
    try:
        listed = addresses(args.scheduler)
    except ValueError as exc:
        raise CtlError("INVALID_ARGUMENT", f"--scheduler: {exc}") from None
    secure = credentials(args.ca, args.cert, args.client_key)
    if secure is None:
        return FailoverChannel(listed, lambda address: grpc.insecure_channel(address), deadline_s=TIMEOUT_S)
    return FailoverChannel(listed, lambda address: grpc.secure_channel(address, secure), deadline_s=TIMEOUT_S)


def call(method: Any, request: Message) -> Any:
    """One unary call; a failure becomes `CODE: message` with the server's code."""
    try:
        return method(request, timeout=TIMEOUT_S)
    except grpc.RpcError as error:
        raise as_ctl_error(error) from None


def pages(method: Any, request: Message) -> Iterator[Any]:
    """Every answer of a paginated call (page_token / next_page_token), in order."""
    while True:
        answer = call(method, request)
        yield answer
        if not answer.next_page_token:
            return
        request.page_token = answer.next_page_token


def as_ctl_error(error: grpc.RpcError) -> CtlError:
    details = error.details() or ""
    code, sep, message = details.partition(": ")
    if not sep or not code.isupper():
        code, message = error.code().name, details or "no details"
    return CtlError(code, message, EXIT_FAILED)


def grade_label(wire_name: str | None) -> str | None:
    """A grade as tables print it: GRADE_HW_SHUNT -> HwShunt."""
    return Grade(types_pb2.Grade.Value(wire_name)).name if wire_name else None


def _enum_name(field: FieldDescriptor, number: int) -> str | None:
    value = field.enum_type.values_by_number.get(number)
    if value is None or value.name.endswith("_UNSPECIFIED"):
        return None
    return value.name


def _scalar(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_ENUM:
        return _enum_name(field, value)
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return to_doc(value)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return value.hex()
    return value


def _is_map(field: FieldDescriptor) -> bool:
    return (field.type == FieldDescriptor.TYPE_MESSAGE
            and field.message_type.GetOptions().map_entry)


def to_doc(message: Message) -> dict[str, Any]:
    """Every field, in declaration order; absent optionals and unset messages are null."""
    doc: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            doc[field.name] = {k: _scalar(value_field, v) for k, v in sorted(value.items())}
        elif field.is_repeated:
            doc[field.name] = [_scalar(field, v) for v in value]
        elif field.has_presence and not message.HasField(field.name):
            doc[field.name] = None
        else:
            doc[field.name] = _scalar(field, value)
    return doc
