"""The agent service: registration, and one stream per agent carrying windows
up and acknowledgements and occupancy down.

A window is counted once: the kernel keeps, per host, the highest window seq
counted (in the ledger, so it survives restarts), and a resend at or below it
changes nothing. An Ack is sent only once the windows' receipt is durable.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from itertools import accumulate, compress, count, repeat
from operator import ge, is_, le, sub

import grpc

from protos.energy import MDEV_PER_DEVICE
from protos.pool.v1 import agent_pb2, agent_pb2_grpc, types_pb2
from scheduler.kernel import ClusterState, WorkerLiveness, WorkerRegistered
from scheduler.service import convert
from scheduler.service.config import SchedulerConfig
from scheduler.service.engine import Change, Engine, LedgerFailed
from scheduler.service.errors import Refused, abort, guarded, not_ready
from scheduler.service.metrics import SchedulerMetrics
from scheduler.service.observed import CPU_PREFIX, Windows

log = logging.getLogger("pool.scheduler.agents")
_CLOSED = object()
IN_FLIGHT = 4   # counted batches a stream may have waiting for durability before it reads on


class AgentServicer(agent_pb2_grpc.AgentServiceServicer):
    def __init__(self, engine: Engine, config: SchedulerConfig, metrics: SchedulerMetrics) -> None:
        self.engine, self.config, self.metrics = engine, config, metrics
        self.meters: dict[str, list[types_pb2.DeviceMeter]] = {}
        self._outboxes: dict[str, asyncio.Queue] = {}
        self._dirty: set[str] = set()   # hosts whose occupancy changed since the last push
        engine.listen(self._push_occupancy)

    def live(self, host: str) -> bool:
        return host in self._outboxes

    @guarded
    async def Register(self, request, context):
        _check_registration(request)
        worker = convert.worker_from(request, self.config.workers.get(request.host_id))
        self.meters[request.host_id] = list(request.devices)
        if self.engine.state.workers.get(request.host_id) != worker:
            await self.engine.decide([WorkerRegistered(worker)], time.time_ns())
        return agent_pb2.RegisterResponse(acked_seq=await self.engine.durable_acked(request.host_id),
                                          capacity=convert.capacity(worker))

    async def Stream(self, request_iterator: AsyncIterator, context: grpc.aio.ServicerContext):
        host = await self._hello(request_iterator, context)
        outbox: asyncio.Queue = asyncio.Queue()
        self._outboxes[host] = outbox
        self.metrics.agents_live.set(len(self._outboxes))
        reader = asyncio.create_task(self._read(host, request_iterator, outbox))
        try:
            await self._set_live(host, True)
            yield agent_pb2.SchedulerMessage(occupancy=self._occupancy(host))
            yield agent_pb2.SchedulerMessage(ack=agent_pb2.Ack(acked_seq=await self.engine.durable_acked(host)))
            while (message := await outbox.get()) is not _CLOSED:
                if isinstance(message, Refused):
                    await abort(self.engine, context, message)
                yield message
        finally:
            reader.cancel()
            if self._outboxes.get(host) is outbox:
                del self._outboxes[host]
                self.metrics.agents_live.set(len(self._outboxes))
                await self._set_live(host, False)

    async def _hello(self, request_iterator: AsyncIterator, context: grpc.aio.ServicerContext) -> str:
        error = None
        if not self.engine.ready:
            error = not_ready(self.engine)
        else:
            first = await anext(aiter(request_iterator), None)
            host = first.hello.host_id if first is not None and first.WhichOneof("body") == "hello" else ""
            if host not in self.engine.committed.state.workers:
                error = Refused("UNREGISTERED_AGENT", f"host {host!r} has not registered; the first message "
                                                      "of a stream must be a Hello from a registered host")
        if error is not None:
            await abort(self.engine, context, error)
        return host

    async def _read(self, host: str, request_iterator: AsyncIterator, outbox: asyncio.Queue) -> None:
        """Check, count and queue each batch as it arrives: while the ledger
        writes one, the next is already checked and folded. With IN_FLIGHT
        batches waiting for durability the stream reads no further (flow
        control holds the agent back); `_acknowledge` answers them, and a
        refusal, in arrival order."""
        pending: asyncio.Queue = asyncio.Queue(IN_FLIGHT)
        acknowledging = asyncio.create_task(self._acknowledge(pending, outbox))
        try:
            end: object = _CLOSED
            try:
                async for message in request_iterator:
                    if message.WhichOneof("body") == "batch":
                        await pending.put(self._count(host, message.batch))
            except Refused as error:
                end = error
            except LedgerFailed as error:
                end = Refused("LEDGER_UNAVAILABLE", str(error))
            except grpc.aio.AioRpcError:
                pass   # the agent went away; it resends above its last ack
            await pending.put(end)
            await acknowledging
        finally:
            acknowledging.cancel()
            outbox.put_nowait(_CLOSED)   # for an end `_acknowledge` did not reach

    def _count(self, host: str, batch: agent_pb2.WindowBatch) -> tuple[asyncio.Future | None, int, int]:
        """Check a batch and count its new windows: (durable, the seq to ack once
        it is, how many were new)."""
        windows = convert.windows_from(batch)
        _check_windows(host, windows, self.meters.get(host, []))
        fresh = windows.since(self.engine.state.acked.get(host, 0))
        self.metrics.duplicate_windows.inc(len(windows.seq) - len(fresh.seq))
        durable = self.engine.record_windows(host, fresh, time.time_ns()) if fresh.seq else None
        return durable, self.engine.state.acked.get(host, 0), len(fresh.seq)

    async def _acknowledge(self, pending: asyncio.Queue, outbox: asyncio.Queue) -> None:
        """Ack each counted batch once it is durable (those before it are then
        too), in order; then pass on how the stream ends."""
        while isinstance(item := await pending.get(), tuple):
            durable, acked, counted = item
            if durable is not None:
                try:
                    await durable
                except LedgerFailed as error:
                    item = Refused("LEDGER_UNAVAILABLE", str(error))
                    break
                self.metrics.windows.inc(counted)
            outbox.put_nowait(agent_pb2.SchedulerMessage(ack=agent_pb2.Ack(acked_seq=acked)))
        if isinstance(item, Refused):
            outbox.put_nowait(item)
        outbox.put_nowait(_CLOSED)

    async def _set_live(self, host: str, live: bool) -> None:
        worker = self.engine.state.workers.get(host)
        if worker is not None and worker.live != live and self.engine.failed is None:
            await self.engine.decide([WorkerLiveness(host, live)], time.time_ns())

    def _push_occupancy(self, change: Change) -> None:
        """Note the hosts a commit changed; push each once per event-loop turn,
        however many commits touched it meanwhile."""
        if not self._dirty and change.workers:
            asyncio.get_running_loop().call_soon(self._flush_occupancy)
        self._dirty |= change.workers

    def _flush_occupancy(self) -> None:
        for host in self._dirty & self._outboxes.keys():
            self._outboxes[host].put_nowait(agent_pb2.SchedulerMessage(occupancy=self._occupancy(host)))
        self._dirty = set()

    def _occupancy(self, host: str) -> agent_pb2.Occupancy:
        """As committed: an agent never splits energy for an admission a crash could take back."""
        committed = self.engine.committed
        return occupancy(committed.state, host, self.meters.get(host, []), committed.occupancy_seq.get(host, 0))


def occupancy(state: ClusterState, host: str, meters: list[types_pb2.DeviceMeter], version: int
              ) -> agent_pb2.Occupancy:
    """Who occupies each device of a host: GPU holders by milli-device, and on
    each CPU package every claim with reserved CPU, by cpu_millis (RULES §2)."""
    worker, load = state.workers[host], state.loads.get(host)
    claims = [state.claims[c] for c in (load.active if load else ())]
    out = agent_pb2.Occupancy(version=version)
    for device in worker.devices:
        out.devices.add(device_id=device.device_id, capacity=MDEV_PER_DEVICE, occupants={
            c.claim_id: d.mdev for c in claims for d in c.devices if d.device_id == device.device_id})
    for meter in meters:
        if meter.kind == types_pb2.CPU_PACKAGE:
            out.devices.add(device_id=meter.device_id, capacity=worker.cpu_millis, occupants={
                c.claim_id: c.spec.resources.cpu_millis for c in claims if c.spec.resources.cpu_millis})
    return out


def _check_registration(request: agent_pb2.RegisterRequest) -> None:
    if not request.host_id:
        raise Refused("INVALID_ARGUMENT", "host_id: a host needs an id")
    ids = [d.device_id for d in request.devices]
    if len(set(ids)) != len(ids) or "" in ids:
        raise Refused("INVALID_ARGUMENT", "devices: every device needs a distinct, non-empty id")


def _check_windows(host: str, windows: Windows, meters: list[types_pb2.DeviceMeter]) -> None:
    """Refuse the whole batch if any window is bad, naming the first."""
    found = [(first, rule) for rule, flags in _rules(windows, {m.device_id for m in meters})
             if (first := next(compress(count(), flags), None)) is not None]
    if found:
        first, rule = min(found, key=lambda f: f[0])   # the earliest window; for one window, the first rule
        raise Refused("INVALID_WINDOW", f"window seq {windows.seq[first]} from {host!r}: {rule(first)}")


def _rules(w: Windows, known: set[str]) -> list[tuple[Callable[[int], str], Iterable]]:
    """Each rule: what it says about window i, and a flag per window (true:
    broken). A rule whose columns pass a whole-column test flags nothing
    without looking at each window."""
    unknown = {d for d in set(w.device) - known if not d.startswith(CPU_PREFIX)}
    bounds = list(accumulate(w.shares, initial=0))
    total = list(accumulate(w.share_uj, initial=0))
    sums = list(map(sub, map(total.__getitem__, bounds[1:]), map(total.__getitem__, bounds)))
    return [
        (lambda i: f"device {w.device[i]!r} was not registered",
         map(unknown.__contains__, w.device) if unknown else ()),
        (lambda i: "seq must be ≥ 1 and above the seq before it", map(ge, [0, *w.seq], w.seq)),
        (lambda i: "end_ns must be after start_ns", map(le, w.end_ns, w.start_ns)),
        (lambda i: "the window and each of its shares need a grade", _ungraded(w)),
        (lambda i: "a window with no figure has no shares",
         (u is None and n for u, n in zip(w.uj, w.shares)) if None in w.uj else ()),
        (lambda i: "a window with a figure has no gap reason",
         (u is not None and g is not None for u, g in zip(w.uj, w.gap)) if w.gap is not None else ()),
        (lambda i: f"shares sum to {sums[i]}, not {w.uj[i]}",
         (n and u is not None and s != u for n, u, s in zip(w.shares, w.uj, sums)) if sums != w.uj else ()),
    ]


def _ungraded(w: Windows) -> Iterable[bool]:
    if None not in w.grade and None not in w.share_grade:
        return ()
    owners = set(compress(w.window_of_shares(), map(is_, w.share_grade, repeat(None))))
    return (g is None or i in owners for i, g in enumerate(w.grade))
