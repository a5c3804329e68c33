"""A minimal in-process AgentService: counts each window once by seq and
acknowledges it. For tests, the bench and demos without a scheduler; it is
also the reference for what the scheduler's side of the stream must do.
"""

from __future__ import annotations

import threading
from concurrent import futures

import grpc

from protos.pool.v1 import agent_pb2, agent_pb2_grpc


class LoopbackReceiver(agent_pb2_grpc.AgentServiceServicer):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked = 0                 # durable in a real scheduler (its ledger)
        self.counted: dict[int, agent_pb2.Window] = {}
        self.duplicates = 0            # resends at or below `acked`, ignored
        self.registrations = 0
        self.arrived = threading.Condition(self.lock)

    def Register(self, request, context):
        with self.lock:
            self.registrations += 1
            return agent_pb2.RegisterResponse(acked_seq=self.acked, capacity=request.capacity)

    def Stream(self, request_iterator, context):
        first = next(request_iterator, None)
        if first is None or not first.HasField("hello"):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "UNREGISTERED_AGENT: the first message must be a Hello")
        for message in request_iterator:
            yield agent_pb2.SchedulerMessage(ack=agent_pb2.Ack(acked_seq=self._count(message.batch.windows)))

    def _count(self, windows) -> int:
        with self.lock:
            for w in windows:
                if w.seq <= self.acked:
                    self.duplicates += 1
                    continue
                self.counted[w.seq] = w
                self.acked = w.seq
            self.arrived.notify_all()
            return self.acked

    def wait_for(self, seq: int, timeout_s: float) -> bool:
        with self.lock:
            return self.arrived.wait_for(lambda: self.acked >= seq, timeout_s)


def serve(receiver: LoopbackReceiver, address: str = "127.0.0.1:0") -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    agent_pb2_grpc.add_AgentServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port(address)
    server.start()
    return server, port
