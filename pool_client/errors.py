"""One exception class per Pool ErrorCode, mapped once from how the scheduler
reports a refusal: a gRPC status whose message is `CODE: sentence`
(scheduler/service/errors.py), with hints in the trailing metadata (the
leader's address after NOT_LEADER, the window seq after INVALID_WINDOW).

    try:
        client.release(claim_id="c1")
    except pool_client.errors.UnknownClaim as error:
        print(error.code, error.message)

Every class derives from PoolError (.code, .message, .status, .retry_after,
.leader). A failure that carries no Pool code (the transport's own, such as a
connection refused or a deadline) is a TransportError whose .code is the gRPC
status name; OutcomeUnknown is the one that may have taken effect (the call was
sent and no answer came back) on a call the library does not send again
(docs/USER-GUIDE.md, "Sending again"); Unreachable is "no scheduler answered
within the connect timeout", with the cause in one line.
"""

from __future__ import annotations

from typing import Any

import grpc

from protos.pool.v1 import types_pb2

LEADER_KEY = "pool-leader"           # trailing metadata: the leader a standby names with NOT_LEADER
RETRY_AFTER_KEY = "pool-retry-after-ms"   # trailing metadata: milliseconds to wait (if the server sends it)


class PoolError(Exception):
    """A call that did not succeed. code: the Pool ErrorCode name (or the gRPC
    status name when the server sent none); message: the sentence after it;
    status: the grpc.StatusCode; retry_after: seconds the server asked to wait,
    if it did; leader: the leader a standby named, if it did."""

    code: str = "UNKNOWN"

    def __init__(self, message: str, *, code: str | None = None, status: grpc.StatusCode | None = None,
                 retry_after: float | None = None, leader: str | None = None) -> None:
        if code is not None:
            self.code = code
        super().__init__(f"{self.code}: {message}")
        self.message = message
        self.status = status if status is not None else grpc.StatusCode.UNKNOWN
        self.retry_after = retry_after
        self.leader = leader


class TransportError(PoolError):
    """A failure the scheduler did not describe with a Pool code (code: the gRPC status name)."""


class OutcomeUnknown(TransportError):
    """The call was sent and no answer came back (the connection broke, the deadline
    passed, the scheduler was stepping down): it may or may not have taken effect,
    and it is not one the library sends again on its own."""


class Unreachable(TransportError):
    """No scheduler could be reached within the connect timeout; the message says why
    (nothing listening, plaintext against TLS, an untrusted certificate, ...)."""

    code = "UNAVAILABLE"


def _class_name(code: str) -> str:
    return "".join(part.capitalize() for part in code.split("_"))


class _ByCode(dict):
    """One class per ErrorCode value of types.proto, named in CamelCase (UNKNOWN_CLAIM ->
    UnknownClaim), each made the first time it is asked for (by code here, or by name as
    this module's attribute) and the same class ever after: making all of them at import
    cost a one-call poolctl more than its call."""

    def __missing__(self, code: str) -> type[PoolError]:
        value = types_pb2.ErrorCode.DESCRIPTOR.values_by_name.get(code)
        if value is None or value.number == 0:
            raise KeyError(code)
        cls = self[code] = type(_class_name(code), (PoolError,), {
            "code": code, "__module__": __name__,
            "__doc__": f"The scheduler refused with {code} (types.proto, ErrorCode {value.number})."})
        return cls

    def __contains__(self, code: object) -> bool:
        value = types_pb2.ErrorCode.DESCRIPTOR.values_by_name.get(code) if isinstance(code, str) else None
        return value is not None and value.number != 0

    def get(self, code: str, default: Any = None) -> Any:
        return self[code] if code in self else default


BY_CODE: dict[str, type[PoolError]] = _ByCode()


def __getattr__(name: str) -> type[PoolError]:
    """errors.UnknownClaim and the like: BY_CODE's class of that name."""
    for value in types_pb2.ErrorCode.DESCRIPTOR.values:
        if value.number and _class_name(value.name) == name:
            cls = globals()[name] = BY_CODE[value.name]
            return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def trailing(error: grpc.RpcError, name: str) -> str | None:
    """The value of trailing metadata key `name` a failed call carried, if any."""
    try:
        metadata = error.trailing_metadata() or ()
    except Exception:   # an error raised before any call was made has no metadata
        return None
    return next((value for key, value in metadata if key == name), None)


def pool_code(error: grpc.RpcError) -> tuple[str | None, str]:
    """(the Pool code, the sentence) of a failed call; (None, details) when it names none."""
    details = error.details() or ""
    code, sep, sentence = details.partition(": ")
    if sep and code in BY_CODE or (sep and code.isupper() and code.replace("_", "").isalpha()):
        return code, sentence
    return None, details


_UNKNOWN: dict[type[PoolError], type[PoolError]] = {}


def _unknown(cls: type[PoolError]) -> type[PoolError]:
    """`cls` and OutcomeUnknown at once (LEDGER_UNAVAILABLE on a call not sent again)."""
    if cls not in _UNKNOWN:
        _UNKNOWN[cls] = type(cls.__name__, (cls, OutcomeUnknown), {"code": cls.code, "__module__": __name__})
    return _UNKNOWN[cls]


def from_rpc_error(error: grpc.RpcError, unknown: bool = False) -> PoolError:
    """The PoolError for a failed call; `unknown`: it was sent and its outcome is unknown."""
    status = error.code()
    code, sentence = pool_code(error)
    retry = trailing(error, RETRY_AFTER_KEY)
    kwargs: dict[str, Any] = {"status": status, "leader": trailing(error, LEADER_KEY),
                              "retry_after": int(retry) / 1000 if retry and retry.isdecimal() else None}
    if code is not None:
        cls = BY_CODE.get(code)
        if cls is None:   # a code newer than this library's protos
            return PoolError(sentence, code=code, **kwargs)
        return (_unknown(cls) if unknown else cls)(sentence, **kwargs)
    cls = OutcomeUnknown if unknown else TransportError
    return cls(sentence or "no details", code=status.name if status else "UNKNOWN", **kwargs)
