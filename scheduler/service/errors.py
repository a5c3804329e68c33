"""Every refusal leaves as a gRPC status whose message starts with the stable
`pool.v1.ErrorCode` name: `CODE: sentence`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NoReturn

import grpc

from scheduler.kernel import KernelError
from scheduler.ledger.receipts import ReceiptTooLarge
from scheduler.service.engine import Engine, LedgerFailed

STATUS = {
    "INVALID_CLAIM": grpc.StatusCode.INVALID_ARGUMENT,
    "UNKNOWN_TENANT": grpc.StatusCode.NOT_FOUND,
    "DUPLICATE_CLAIM": grpc.StatusCode.ALREADY_EXISTS,
    "UNKNOWN_CLAIM": grpc.StatusCode.NOT_FOUND,
    "CLAIM_NOT_OPEN": grpc.StatusCode.FAILED_PRECONDITION,
    "PROGRESS_REGRESSED": grpc.StatusCode.INVALID_ARGUMENT,
    "UNREGISTERED_AGENT": grpc.StatusCode.FAILED_PRECONDITION,
    "INVALID_WINDOW": grpc.StatusCode.INVALID_ARGUMENT,
    "UNKNOWN_WORK_CLASS": grpc.StatusCode.NOT_FOUND,
    "EMPTY_WORK_CLASS": grpc.StatusCode.FAILED_PRECONDITION,
    "NOT_READY": grpc.StatusCode.UNAVAILABLE,
    "LEDGER_UNAVAILABLE": grpc.StatusCode.UNAVAILABLE,
    "WITNESS_REJECTED": grpc.StatusCode.INVALID_ARGUMENT,
    "INVALID_ARGUMENT": grpc.StatusCode.INVALID_ARGUMENT,
    "WATCH_LAGGED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "NOT_LEADER": grpc.StatusCode.UNAVAILABLE,
    "SHUTTING_DOWN": grpc.StatusCode.UNAVAILABLE,
    "NO_CLIENT_CERTIFICATE": grpc.StatusCode.UNAUTHENTICATED,
    "UNKNOWN_PRINCIPAL": grpc.StatusCode.UNAUTHENTICATED,
    "ROLE_NOT_ALLOWED": grpc.StatusCode.PERMISSION_DENIED,
    "OUT_OF_SCOPE": grpc.StatusCode.PERMISSION_DENIED,
    "UNKNOWN_WORKER": grpc.StatusCode.NOT_FOUND,
    "CLAIM_NEVER_FITS": grpc.StatusCode.FAILED_PRECONDITION,
    "BIND_CONFLICT": grpc.StatusCode.FAILED_PRECONDITION,
    "CLAIM_NOT_ADMITTED": grpc.StatusCode.FAILED_PRECONDITION,
    "HOST_STREAMING": grpc.StatusCode.FAILED_PRECONDITION,
    "DEVICES_HELD": grpc.StatusCode.FAILED_PRECONDITION,
    "TOO_LARGE": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "RATE_LIMITED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "TOO_MANY_OPEN_CLAIMS": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "PRINCIPAL_LIMIT": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "SERVICE_BUSY": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "AMBIGUOUS_CLAIM": grpc.StatusCode.INVALID_ARGUMENT,
}
MESSAGE_CHARS = 1_000   # a refusal quotes at most this much: it may echo a hostile field


class Refused(Exception):
    """A request refused before it changed anything."""

    def __init__(self, code: str, message: str, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        if len(message) > MESSAGE_CHARS:
            message = message[:MESSAGE_CHARS] + "…"
        super().__init__(f"{code}: {message}")
        self.code = code
        self.status = STATUS[code]
        self.metadata = metadata   # trailing metadata sent with the refusal


# codes whose point is a malformed field: their message starts with the field's name
NAMES_FIELD = {"INVALID_CLAIM", "INVALID_ARGUMENT", "PROGRESS_REGRESSED", "CLAIM_NEVER_FITS"}


def refused(error: KernelError) -> Refused:
    named = error.field and error.code.name in NAMES_FIELD
    return Refused(error.code.name, f"{error.field}: {error.message}" if named else error.message)


def not_ready(engine: Engine) -> Refused:
    """NOT_LEADER on a standby (service/leader.py), else NOT_READY."""
    if engine.not_leader is not None:
        return engine.not_leader()
    if engine.waiting_for is not None:
        return Refused("NOT_READY", f"start-up waits until the ledger can be written: {engine.waiting_for}")
    return Refused("NOT_READY", "the ledger is still being verified and replayed")


def too_large(error: ReceiptTooLarge) -> Refused:
    return Refused("TOO_LARGE", str(error))


def checked(result):
    """The kernel's answer, or Refused when it is a KernelError."""
    if isinstance(result, KernelError):
        raise refused(result)
    return result


async def abort(engine: Engine, context: grpc.aio.ServicerContext, error: Refused) -> NoReturn:
    """End a call with a refusal, counted by its code."""
    engine.on_refused(error.code)
    if error.metadata:
        context.set_trailing_metadata(error.metadata)
    await context.abort(error.status, str(error))


def guarded(method: Callable) -> Callable:
    """A unary handler that answers NOT_READY until replay is done, and turns
    a refusal or a failed ledger append into its status.

    A refusal is judged on the engine's latest state, which runs ahead of the
    ledger while receipts are being written (committed.py): "CLAIM_NOT_OPEN"
    for a claim whose release is still in flight is true only once that
    release is durable. So a refusal is told only after everything queued
    before it is durable, and once an append has failed (memory is ahead of
    the ledger, engine.failed) every call is answered LEDGER_UNAVAILABLE:
    nothing may be told from a state a restart takes back."""

    @functools.wraps(method)
    async def handler(self, request, context: grpc.aio.ServicerContext):
        engine = self.engine
        try:
            if not engine.ready:
                raise not_ready(engine)
            if engine.failed is not None:
                raise LedgerFailed(str(engine.failed))
            try:
                return await method(self, request, context)
            except (Refused, ReceiptTooLarge):
                await engine.durable()   # the state the refusal was judged on, durable first
                raise
        except Refused as error:
            await abort(engine, context, error)
        except ReceiptTooLarge as error:
            await abort(engine, context, too_large(error))
        except LedgerFailed as error:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"LEDGER_UNAVAILABLE: {error}")

    return handler
