"""Stopping without CANCELLED: every call a stopping scheduler had, or gets,
ends with a status a client can act on (docs/USER-GUIDE.md, "When a call fails").

grpc's own stop cancels whatever is still running when its grace ends, and a
cancelled call reaches the client as CANCELLED, which no client retries. So
the scheduler stops in two steps. First `Drain.close`: from then on every new
call (health excepted) is refused at the door with `refusal` (nothing done);
streams, which never end by themselves, are ended at once with `cut`; unary
calls in flight get up to `patience_s` to finish as they would, and any still
running then is cut short with `cut` (its outcome unknown: the client sends
it again). Only then is grpc's server stopped, with nothing left to cancel.

A stream is cut where it waits for its next message (a Watch for a change,
an agent's stream for an acknowledgement); one that grpc is sending a
message for is cut right after it. Before grpc's server stops, `close` waits
for a moment with no new call (QUIET_S, at most `patience_s` more): a client
refused SHUTTING_DOWN has gone elsewhere, and grpc's stop, which cancels a
call that reaches it in that instant, finds none.

A call the client itself cancels, or whose deadline passes, is grpc's to
end as before: only calls cut by `close` are answered with `cut`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from scheduler.service.errors import Refused

HEALTH = "/grpc.health.v1.Health/"
QUIET_S = 0.1   # no new call for this long: clients have gone elsewhere, grpc's server may stop


class _Call:
    """One call in flight: whether it streams, and whether it waits in the
    handler (where a cancellation lands in code that answers it with a status)."""
    __slots__ = ("streaming", "waiting")

    def __init__(self, streaming: bool) -> None:
        self.streaming, self.waiting = streaming, not streaming


class Drain(grpc.aio.ServerInterceptor):
    """The outermost server interceptor: it knows every call in flight."""

    def __init__(self, on_refused: Callable[[str], None] = lambda code: None) -> None:
        self.refusal: Refused | None = None   # set by close: what a new call is answered
        self.cut: Refused | None = None       # set by close: what a call cut short is answered
        self._calls: dict[asyncio.Task, _Call] = {}   # in flight
        self._on_refused = on_refused
        self._arrived = 0.0   # when the last call came (monotonic)

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        wrap = _WRAPPERS[handler.request_streaming, handler.response_streaming]
        return wrap(self, handler, not details.method.startswith(HEALTH))

    @property
    def in_flight(self) -> int:
        return len(self._calls)

    async def close(self, refusal: Refused, cut: Refused, patience_s: float) -> None:
        """Refuse new calls with `refusal`; end every stream, and after
        `patience_s` every unary call still running, with `cut`; return once
        no call is in flight (or, should one ignore its cancellation, a second later)."""
        self.refusal, self.cut = refusal, cut
        for task, call in list(self._calls.items()):
            if call.streaming and call.waiting:
                task.cancel()   # one being sent a message ends before its next (_stream_response)
        deadline = time.monotonic() + patience_s
        while self._calls and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for task in list(self._calls):
            task.cancel()
        deadline = time.monotonic() + 1.0
        while self._calls and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        deadline = time.monotonic() + patience_s
        while time.monotonic() - self._arrived < QUIET_S and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def _refuse(self, context: grpc.aio.ServicerContext, error: Refused) -> None:
        self._on_refused(error.code)
        await context.abort(error.status, str(error))

    def _enter(self, streaming: bool) -> tuple[asyncio.Task, _Call]:
        task = asyncio.current_task()
        assert task is not None
        call = self._calls[task] = _Call(streaming)
        return task, call

    async def _door(self, context: grpc.aio.ServicerContext, refusable: bool) -> None:
        """Note the call's arrival; refuse it if closing (health is never refused)."""
        self._arrived = time.monotonic()
        if self.refusal is not None and refusable:
            await self._refuse(context, self.refusal)

    async def _cut(self, context: grpc.aio.ServicerContext) -> None:
        """After a CancelledError: the cut status if close cut the call, else grpc's own cancellation."""
        if self.cut is None:
            raise asyncio.CancelledError
        await self._refuse(context, self.cut)


def _unary_response(door: Drain, handler: Any, refusable: bool, behaviour: Callable, make: Callable) -> Any:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await door._door(context, refusable)
        task, _ = door._enter(False)
        try:
            return await behaviour(request, context)
        except asyncio.CancelledError:
            await door._cut(context)
        finally:
            door._calls.pop(task, None)
    return make(call, handler.request_deserializer, handler.response_serializer)


def _stream_response(door: Drain, handler: Any, refusable: bool, behaviour: Callable, make: Callable) -> Any:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await door._door(context, refusable)
        task, state = door._enter(True)
        responses = behaviour(request, context)
        try:
            while True:
                if door.cut is not None:   # closing came while grpc was sending the last message
                    await door._refuse(context, door.cut)
                state.waiting = True
                try:
                    response = await anext(responses)
                except StopAsyncIteration:
                    return
                finally:
                    state.waiting = False
                yield response
        except asyncio.CancelledError:
            await door._cut(context)
        finally:
            door._calls.pop(task, None)
            await responses.aclose()
    return make(call, handler.request_deserializer, handler.response_serializer)


_WRAPPERS = {
    (False, False): lambda d, h, r: _unary_response(d, h, r, h.unary_unary, grpc.unary_unary_rpc_method_handler),
    (True, False): lambda d, h, r: _unary_response(d, h, r, h.stream_unary, grpc.stream_unary_rpc_method_handler),
    (False, True): lambda d, h, r: _stream_response(d, h, r, h.unary_stream, grpc.unary_stream_rpc_method_handler),
    (True, True): lambda d, h, r: _stream_response(d, h, r, h.stream_stream, grpc.stream_stream_rpc_method_handler),
}
