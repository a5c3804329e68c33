"""poolctl's side of the wire: the connection to the scheduler (through the
client library, pool_client), its errors, and protobuf messages turned into
plain JSON documents.

Where poolctl finds the scheduler and its files, first found wins: the flags
(--scheduler, --ca, --cert, --key, --timeout), then $POOL_SCHEDULER, $POOL_CA,
$POOL_CERT, $POOL_KEY, then the client configuration's context (--context,
else $POOL_CONTEXT, else its current-context; pool_client/config.py), then
127.0.0.1:7070 in plaintext with a 5 s connect timeout. An address without a
port means port 7070.

proto3's own JSON mapping prints 64-bit integers as strings; operators read
µJ as numbers, so this does its own walk of the descriptor instead. Enums
have one spelling in every JSON poolctl prints: the value's name in the
.proto files (`ADMITTED`, `GRADE_HW_SHUNT`, `PLACEMENT_EXCLUSIVE`), as an
independent client built from them reads it, and null for the *_UNSPECIFIED
zero. Tables print grades as RULES names them (`HwShunt`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from pool_client import config as client_config
from pool_client.calls import RPCS
from protos.energy import Grade
from protos.pool.v1 import types_pb2
from scheduler.ctl.output import EXIT_FAILED, EXIT_USAGE, CtlError, add_output_flag

if TYPE_CHECKING:
    import grpc

    import pool_client

# grpc and pool_client's clients are imported when a verb first connects, so an
# offline verb that only borrows grade_label or to_doc (split, ledger verify) loads no gRPC.

DEFAULT_SCHEDULER = "127.0.0.1:7070"
TIMEOUT_S = 30.0   # a call's whole budget, failovers included


def add_scheduler_flag(parser: Any, key_flag: str = "--key") -> None:
    """--scheduler, the caller's mTLS files (--ca/--cert/--key, a verb whose --key means
    something else takes the client key as `key_flag`), --context and --timeout."""
    parser.add_argument("--scheduler", default=None,
                        help="scheduler address (port 7070 if none), or a leader and its standbys as a "
                             f"comma-separated list (default: $POOL_SCHEDULER, the context's, or {DEFAULT_SCHEDULER})")
    for flag, dest, variable, what in (
            ("--ca", "ca", "POOL_CA", "the CA that signed the scheduler's certificate"),
            ("--cert", "cert", "POOL_CERT", "your client certificate (its CN is your principal)"),
            (key_flag, "client_key", "POOL_KEY", "your client certificate's key")):
        parser.add_argument(flag, dest=dest, default=None, metavar="PEM",
                            help=f"{what} (default: ${variable}, or the context's); without a CA: plaintext")
    parser.add_argument("--context", default=None, metavar="NAME",
                        help="the client configuration's context to use (default: $POOL_CONTEXT, or its "
                             "current-context); see `poolctl config`")
    parser.add_argument("--timeout", type=_seconds, default=None, metavar="SECONDS",
                        help="give up reaching a scheduler after this long (default: the context's, or 5)")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        import argparse
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0")
    return value


def online_verb(verbs: Any, name: str, help_text: str, run: Any) -> Any:
    """A sub-command that asks a running scheduler: --scheduler and -o."""
    p = verbs.add_parser(name, help=help_text)
    add_scheduler_flag(p)
    add_output_flag(p)
    p.set_defaults(run=run)
    return p


def _context(args: Any) -> client_config.Context:
    try:
        return client_config.context(getattr(args, "context", None))
    except client_config.ConfigError as error:
        raise CtlError("USAGE", str(error), EXIT_USAGE) from None


def default_tenant(args: Any) -> str | None:
    """The context's tenant: what Submit, List, Watch and Splits use when the command names none."""
    return _context(args).tenant


def client(args: Any) -> pool_client.Client:
    """A pool_client.Client as the flags, the environment and the context say (module docstring)."""
    import pool_client
    context = _context(args)

    def pick(flag: str, variable: str, from_context: Any) -> Any:
        return getattr(args, flag, None) or os.environ.get(variable) or from_context or None
    scheduler = pick("scheduler", "POOL_SCHEDULER", context.scheduler) or DEFAULT_SCHEDULER
    ca, cert = pick("ca", "POOL_CA", context.ca), pick("cert", "POOL_CERT", context.cert)
    key = pick("client_key", "POOL_KEY", context.key)
    if (cert or key) and not ca:
        raise CtlError("USAGE", "--cert/--key need --ca (or $POOL_CA, or a context's ca) too", EXIT_USAGE)
    if bool(cert) != bool(key):
        raise CtlError("USAGE", "--cert and --key go together", EXIT_USAGE)
    try:
        return pool_client.Client(scheduler, ca=ca, cert=cert, key=key, tenant=context.tenant,
                                  timeout=getattr(args, "timeout", None) or context.timeout, deadline=TIMEOUT_S)
    except ValueError as error:
        raise CtlError("USAGE", str(error), EXIT_USAGE) from None


def channel(args: Any) -> grpc.Channel:
    """What the verbs build their generated stubs on: every call goes through the library."""
    return LibraryChannel(client(args))


_BY_PATH = {f"/pool.v1.{rpc.service}/{rpc.name}": rpc for rpc in RPCS}


class LibraryChannel:
    """The generated stubs' calls, made by a pool_client.Client (failover, resending,
    the connect timeout and its one-line causes, typed errors)."""

    def __init__(self, library: pool_client.Client) -> None:
        self.client = library

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        rpc = _BY_PATH[method]
        return lambda request, timeout=None, **_: self.client.call(rpc, request, timeout)

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        rpc = _BY_PATH[method]
        if rpc.name == "Watch":
            return lambda request, timeout=None, **_: self.client.watch(request)
        return lambda request, timeout=None, **_: getattr(self.client, rpc.method)(request, timeout=timeout)

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(method)

    stream_stream = stream_unary

    def close(self) -> None:
        self.client.close()


def call(method: Any, request: Message) -> Any:
    """One unary call; a failure becomes `CODE: message` with the server's code."""
    try:
        return method(request, timeout=TIMEOUT_S)
    except Exception as error:
        if not _failed_call(error):
            raise
        raise as_ctl_error(error) from None


def _failed_call(error: Exception) -> bool:
    errors, grpc = sys.modules.get("pool_client.errors"), sys.modules.get("grpc")
    return ((errors is not None and isinstance(error, errors.PoolError))
            or (grpc is not None and isinstance(error, grpc.RpcError)))


def pages(method: Any, request: Message) -> Iterator[Any]:
    """Every answer of a paginated call (page_token / next_page_token), in order."""
    while True:
        answer = call(method, request)
        yield answer
        if not answer.next_page_token:
            return
        request.page_token = answer.next_page_token


def as_ctl_error(error: Any) -> CtlError:
    """A failed call (a pool_client.PoolError or a grpc.RpcError) as poolctl's one line."""
    errors = sys.modules.get("pool_client.errors")
    if errors is not None and isinstance(error, errors.PoolError):
        return CtlError(error.code, error.message, EXIT_FAILED)
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


def to_doc(message: Message) -> dict[str, Any]:
    """Every field, in declaration order; absent optionals and unset messages are null."""
    doc: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if isinstance(value, Mapping):   # a map field (asking the descriptor's options would load descriptor_pb2)
            value_field = field.message_type.fields_by_name["value"]
            doc[field.name] = {k: _scalar(value_field, v) for k, v in sorted(value.items())}
        elif field.is_repeated:
            doc[field.name] = [_scalar(field, v) for v in value]
        elif field.has_presence and not message.HasField(field.name):
            doc[field.name] = None
        else:
            doc[field.name] = _scalar(field, value)
    return doc
