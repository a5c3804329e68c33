"""A grpc.Channel over several schedulers (a leader and its standbys) that
sends each unary call to the leader, for code written against the generated
stubs (pool_client.Client is the library's own way; it follows the same rules).

    channel = FailoverChannel(["sched-a:7070", "sched-b:7070"])
    claims = claims_pb2_grpc.ClaimsStub(channel)

A call that never ran (no connection, a standby's NOT_LEADER, NOT_READY) is
sent again, to the leader a standby named, else to the next address, with
backoff once every address has been tried, until the call's timeout (default
DEADLINE_S) runs out. A call sent without an answer (LEDGER_UNAVAILABLE,
SHUTTING_DOWN, a connection lost mid-call) is sent again only for an RPC
pool_client/calls.py marks safe to resend. Any other answer is the caller's,
as raw grpc.RpcError. Streams (Watch, LedgerExport) fail over only before
their first message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from pool_client.calls import RPCS
from pool_client.failover import Sent, Targets, sent

RESEND = {f"/pool.v1.{rpc.service}/{rpc.name}" for rpc in RPCS if rpc.resend}

DEADLINE_S = 30.0


class FailoverChannel(grpc.Channel):
    def __init__(self, addresses: list[str], connect: Callable[[str], grpc.Channel] = grpc.insecure_channel,
                 deadline_s: float = DEADLINE_S) -> None:
        self.targets = Targets(addresses)
        self._connect, self._deadline_s = connect, deadline_s
        self._channels: dict[str, grpc.Channel] = {}

    def _channel(self, address: str) -> grpc.Channel:
        if address not in self._channels:
            self._channels[address] = self._connect(address)
        return self._channels[address]

    def retrying(self, attempt: Callable[[grpc.Channel, float], Any], timeout: float | None,
                 method: str = "") -> Any:
        """attempt(channel, seconds left) on the leader, failing over as the module says."""
        deadline = time.monotonic() + (self._deadline_s if timeout is None else timeout)
        resend = method in RESEND
        while True:
            try:
                result = attempt(self._channel(self.targets.current), max(0.0, deadline - time.monotonic()))
                self.targets.succeeded()
                return result
            except grpc.RpcError as error:
                kind = sent(error)
                if kind is Sent.ANSWERED or (kind is Sent.UNKNOWN and not resend) or time.monotonic() >= deadline:
                    raise
                time.sleep(min(self.targets.failed(error), max(0.0, deadline - time.monotonic())))

    def unary_unary(self, method, request_serializer=None, response_deserializer=None, **kwargs):
        def call(request, timeout=None, metadata=None, **options):
            return self.retrying(lambda channel, left: channel.unary_unary(
                method, request_serializer, response_deserializer, **kwargs)(
                    request, timeout=left, metadata=metadata, **options), timeout, method)
        return call

    def unary_stream(self, method, request_serializer=None, response_deserializer=None, **kwargs):
        def call(request, timeout=None, metadata=None, **options):
            def first(channel, left):
                stream = channel.unary_stream(method, request_serializer, response_deserializer, **kwargs)(
                    request, timeout=None if timeout is None else left, metadata=metadata, **options)
                return stream, next(stream, _END)
            return _chained(*self.retrying(first, timeout, method))
        return call

    def stream_unary(self, method, request_serializer=None, response_deserializer=None, **kwargs):
        return self._channel(self.targets.current).stream_unary(method, request_serializer,
                                                                 response_deserializer, **kwargs)

    def stream_stream(self, method, request_serializer=None, response_deserializer=None, **kwargs):
        return self._channel(self.targets.current).stream_stream(method, request_serializer,
                                                                  response_deserializer, **kwargs)

    def subscribe(self, callback, try_to_connect=False):
        self._channel(self.targets.current).subscribe(callback, try_to_connect)

    def unsubscribe(self, callback):
        self._channel(self.targets.current).unsubscribe(callback)

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    def __enter__(self) -> FailoverChannel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_END = object()


def _chained(stream: Iterator, head: Any) -> Iterator:
    if head is _END:
        return
    yield head
    yield from stream
