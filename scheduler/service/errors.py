"""Every refusal leaves as a gRPC status whose message starts with the stable
`pool.v1.ErrorCode` name: `CODE: sentence`."""

from __future__ import annotations

import functools
from collections.abc import Callable

import grpc

from scheduler.kernel import KernelError
from scheduler.service.engine import LedgerFailed

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
}


class Refused(Exception):
    """A request refused before it changed anything."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.status = STATUS[code]


def refused(error: KernelError) -> Refused:
    return Refused(error.code.name, f"{error.field}: {error.message}" if error.field else error.message)


def checked(result):
    """The kernel's answer, or Refused when it is a KernelError."""
    if isinstance(result, KernelError):
        raise refused(result)
    return result


def guarded(method: Callable) -> Callable:
    """A unary handler that answers NOT_READY until replay is done, and turns
    a refusal or a failed ledger append into its status."""

    @functools.wraps(method)
    async def handler(self, request, context: grpc.aio.ServicerContext):
        try:
            if not self.engine.ready:
                raise Refused("NOT_READY", "the ledger is still being verified and replayed")
            return await method(self, request, context)
        except Refused as error:
            self.engine.on_refused(error.code)
            await context.abort(error.status, str(error))
        except LedgerFailed as error:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"LEDGER_UNAVAILABLE: {error}")

    return handler
