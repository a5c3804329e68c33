"""The stream to the scheduler: Register, then one bidirectional Stream.

Windows wait in the durable `agent.spool.Spool` until the scheduler
acknowledges them. On (re)connect, Register answers the highest seq the
scheduler has counted; the agent resends everything above it, so each window
is counted exactly once, across scheduler outages and agent restarts alike.
A batch refused at a window (INVALID_WINDOW with its seq) is cut there on the
next session, and a window refused on `stream.refusals_before_gap`
consecutive sessions becomes a gap (agent/refusals.py).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterator

import grpc

from agent.metrics import AgentMetrics
from agent.refusals import Refusals
from agent.spool import Spool
from protos.failover import Targets, addresses, leader_hint
from protos.refusals import refused_seq
from protos.pool.v1 import agent_pb2, agent_pb2_grpc

log = logging.getLogger(__name__)
REGISTER_TIMEOUT_S = 10
CHANNEL_OPTIONS = [("grpc.keepalive_time_ms", 30_000), ("grpc.keepalive_timeout_ms", 10_000)]


class Backoff:
    """Exponential backoff with jitter: the n-th retry waits a random time in
    [½, 1] × min(cap, initial × 2ⁿ), so restarted agents do not reconnect in step."""

    def __init__(self, initial_s: float, cap_s: float):
        self.initial, self.cap, self.attempt = initial_s, cap_s, 0

    def next(self) -> float:
        ceiling = min(self.cap, self.initial * 2 ** self.attempt)
        self.attempt += 1
        return ceiling * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.attempt = 0


class StreamClient:
    def __init__(self, target: str, register: Callable[[], agent_pb2.RegisterRequest], spool: Spool,
                 metrics: AgentMetrics, *, on_acked: Callable[[int], None] = lambda seq: None,
                 on_occupancy: Callable[[agent_pb2.Occupancy], None] = lambda occ: None,
                 batch_max: int = 500, backoff: Backoff | None = None,
                 credentials: grpc.ChannelCredentials | None = None, refusals_before_gap: int = 3):
        # `target`: one address, or a leader and its standbys, comma-separated; a standby's
        # NOT_LEADER names the leader, and the stream moves there (protos/failover.py)
        self._targets = Targets(addresses(target))
        self._register, self._spool, self._metrics = register, spool, metrics
        self._on_acked, self._on_occupancy = on_acked, on_occupancy
        self._batch_max, self._credentials = batch_max, credentials
        self._backoff = backoff or Backoff(0.5, 30.0)
        self._refusals = Refusals(spool, refusals_before_gap)
        self._stop = threading.Event()
        self._call = None
        self.connected = threading.Event()

    def run(self) -> None:
        """Connect, stream, and reconnect until `close()`."""
        while not self._stop.is_set():
            self._metrics.reconnects.inc()
            try:
                self._session()
                error = None
            except grpc.RpcError as exc:
                error = exc
                if not self._stop.is_set():
                    self._failed(exc)
            self.connected.clear()
            self._targets.failed(error)
            self._stop.wait(0.05 if error is not None and leader_hint(error) else self._backoff.next())

    def _failed(self, error: grpc.RpcError) -> None:
        seq = refused_seq(error)
        if seq is None:
            log.warning("scheduler %s: %s: %s", self._target, error.code().name, error.details())
        elif self._refusals.refused(seq, error.details()):
            self._backoff.reset()   # a new window refused: the one before it is behind us

    @property
    def _target(self) -> str:
        return self._targets.current

    def close(self) -> None:
        self._stop.set()
        if self._call is not None:
            self._call.cancel()

    def _channel(self) -> grpc.Channel:
        if self._credentials is None:
            return grpc.insecure_channel(self._target, options=CHANNEL_OPTIONS)
        return grpc.secure_channel(self._target, self._credentials, options=CHANNEL_OPTIONS)

    def _session(self) -> None:
        with self._channel() as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            request = self._register()
            registered = stub.Register(request, timeout=REGISTER_TIMEOUT_S)
            self._spool.resolved(registered.acked_seq)
            self._refusals.acked(registered.acked_seq)
            self._on_acked(registered.acked_seq)
            done = threading.Event()
            self._call = stub.Stream(self._requests(request.host_id, registered.acked_seq, done))
            if self._refusals.seq is None:   # while a window is refused again and again, retries slow down
                self._backoff.reset()
            self._targets.succeeded()
            self.connected.set()
            log.info("streaming to %s from seq %d", self._target, registered.acked_seq + 1)
            try:
                for message in self._call:
                    self._receive(message)
            finally:
                done.set()
                self._call.cancel()

    def _receive(self, message: agent_pb2.SchedulerMessage) -> None:
        if message.HasField("ack"):
            self._acked(message.ack.acked_seq)
        elif message.HasField("occupancy"):
            try:
                self._on_occupancy(message.occupancy)
            except ValueError as exc:
                log.error("occupancy version %d refused, keeping the previous one: %s",
                          message.occupancy.version, exc)

    def _acked(self, seq: int) -> None:
        self._spool.ack(seq)
        self._refusals.acked(seq)
        self._on_acked(seq)

    def _requests(self, host_id: str, acked: int, done: threading.Event) -> Iterator[agent_pb2.AgentMessage]:
        yield agent_pb2.AgentMessage(hello=agent_pb2.Hello(host_id=host_id))
        sent = acked
        while not done.is_set() and not self._stop.is_set():
            batch = self._spool.offer(sent, self._batch_max, timeout_s=0.2, cut=self._refusals.seq)
            if batch:
                sent = batch[-1].seq
                yield agent_pb2.AgentMessage(batch=agent_pb2.WindowBatch(windows=batch))
