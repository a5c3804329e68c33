"""The agent service: registration, and one stream per agent carrying windows
up and acknowledgements and occupancy down.

A window is counted once: the kernel keeps, per host, the highest window seq
counted (in the ledger, so it survives restarts), and a resend at or below it
changes nothing. Every batch goes through the evidence door
(windows/evidence.py) first, which keeps its new windows; a batch with a bad
one is refused whole and leaves no receipt. An Ack is sent only once the
windows' receipt is durable.

A host streams on one stream at a time: a second stream for a host that is
live on one is refused (HOST_STREAMING), so it cannot take the host over or
mark it not live. A host becomes live with its first counted batch, and is
marked not live by the tick once it has had no stream for
RECONNECT_GRACE_S (main.py): a stream that ends, refused or not, writes
nothing itself.

(Over 300 lines: registration and its checks, and the stream with its
outbox and flow control; what a window must be is windows/evidence.py's.)
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from functools import partial
from collections.abc import AsyncIterator, Callable, Mapping

import grpc
from google.protobuf.message_factory import GetMessageClass

from protos.energy import MDEV_PER_DEVICE
from protos.pool.v1 import agent_pb2, agent_pb2_grpc, types_pb2
from scheduler.kernel import ClaimState, ClusterState, Worker, WorkerLiveness, WorkerRegistered, counted
from scheduler.kernel.limits import MAX_DEVICES, MAX_GPU_TYPE_CHARS, NAME, NAME_RULE
from scheduler.service import convert
from scheduler.service.windows import evidence
from scheduler.service.config import SchedulerConfig
from scheduler.service.engine import Change, Counting, Engine, LedgerFailed
from scheduler.ledger.receipts import ReceiptTooLarge
from scheduler.service.errors import Refused, abort, guarded, not_ready, too_large
from scheduler.service.limits import Admission, RateLimiter
from scheduler.service.metrics import SchedulerMetrics
from scheduler.service.windows.batch import CPU_PREFIX, Windows, batch_columns
from scheduler.service.windows.occupancy import occupants
from scheduler.service.windows.occupancy_wire import OccupancyWire
from scheduler.service.principal import caller
from scheduler.service.state import ServiceState

log = logging.getLogger("pool.scheduler.agents")
IN_FLIGHT = 4   # counted batches a stream may have waiting for durability before it reads on
# a host's occupancy is pushed at most this often: the changes meanwhile go out together in the
# next push (docs/OPERATIONS.md "Occupancy pushes" says why this is safe)
OCCUPANCY_EVERY_S = 0.5


class Outbox:
    """What one stream still has to send its agent: the latest occupancy, the
    latest ack (acks are cumulative, so a newer one replaces one not yet
    sent), and how the stream ends. It stays this small whatever the agent
    reads; and the windows read but not yet acknowledged *to the agent* are
    bounded (`limit`): past it, reading pauses until the agent takes its acks."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.occupancy: bytes | None = None   # a SchedulerMessage, encoded (occupancy_wire.py)
        self.ack: int | None = None
        self.end: Refused | bool = False     # True: ended; a Refused: ended with it
        self._unacked = 0                    # windows read and not yet covered by a sent ack
        self._covered: deque[tuple[int, int]] = deque()   # (seq an ack will cover, windows) in order
        self._changed = asyncio.Event()

    def _wake(self) -> None:
        self._changed.set()

    async def reserve(self, windows: int) -> None:
        """Wait until `windows` more may be read (always, when none are unacked)."""
        while self._unacked and self._unacked + windows > self.limit:
            self._changed.clear()
            await self._changed.wait()
        self._unacked += windows

    def acknowledge(self, seq: int, windows: int) -> None:
        """A batch of `windows` is durable: the next ack says `seq`."""
        self._covered.append((seq, windows))
        self.ack = seq
        self._wake()

    def push(self, occupancy: bytes) -> None:
        self.occupancy = occupancy
        self._wake()

    def finish(self, end: Refused | bool = True) -> None:
        if self.end is False:
            self.end = end
        self._wake()

    def sent_ack(self, seq: int) -> None:
        while self._covered and self._covered[0][0] <= seq:
            self._unacked -= self._covered.popleft()[1]
        self._wake()

    async def next(self) -> agent_pb2.SchedulerMessage | bytes | Refused | None:
        """The next thing to send: occupancy first (encoded), then the ack, then
        the end (None, or the refusal)."""
        while True:
            if self.occupancy is not None:
                message, self.occupancy = self.occupancy, None
                return message
            if self.ack is not None:
                message, self.ack = agent_pb2.SchedulerMessage(ack=agent_pb2.Ack(acked_seq=self.ack)), None
                return message
            if self.end is not False:
                return self.end if isinstance(self.end, Refused) else None
            self._changed.clear()
            await self._changed.wait()


class AgentServicer(agent_pb2_grpc.AgentServiceServicer):
    def __init__(self, engine: Engine, config: SchedulerConfig, metrics: SchedulerMetrics) -> None:
        self.engine, self.config, self.metrics = engine, config, metrics
        self.limits = config.limits
        self.meters: dict[str, list[types_pb2.DeviceMeter]] = {}
        self._outboxes: dict[str, Outbox] = {}
        self._opened: dict[str, int] = {}           # host -> when its stream sent its first occupancy
        self._ended: dict[str, float] = {}          # host -> monotonic s its last stream ended
        self.started = time.monotonic()
        self._dirty: set[str] = set()   # hosts whose occupancy changed since the last push
        self._pushed: dict[str, float] = {}   # host -> when (loop.time()) its occupancy was last pushed
        self._flush: asyncio.TimerHandle | None = None   # the next _flush_occupancy, when one is due
        self._wire = OccupancyWire()   # each host's occupancy, kept encoded
        self._rates = RateLimiter(self.limits.windows_per_s, self.limits.window_burst)
        self.admission = Admission({})   # the scheduler's (main.py): receipts per principal per hour
        engine.listen(self._push_occupancy)

    def live(self, host: str) -> bool:
        return host in self._outboxes

    def absent_s(self, host: str) -> float:
        """How long the host has had no stream (since start-up, if none yet)."""
        if host in self._outboxes:
            return 0.0
        return time.monotonic() - self._ended.get(host, self.started)

    @guarded
    async def Register(self, request, context):
        _check_registration(request)
        worker = convert.worker_from(request, self.config.workers.get(request.host_id))
        await self.engine.decide(lambda latest: _registered(latest.kernel, worker, request, self.meters),
                                 time.time_ns())
        return agent_pb2.RegisterResponse(acked_seq=await self.engine.durable_acked(request.host_id),
                                          capacity=convert.capacity(worker))

    async def Stream(self, request_iterator: AsyncIterator, context: grpc.aio.ServicerContext):
        host = await self._hello(request_iterator, context)
        outbox = Outbox(self.limits.max_unacked_windows)
        self._outboxes[host] = outbox
        self.metrics.agents_live.set(len(self._outboxes))
        self._opened[host] = time.time_ns()
        first = self._occupancy(host)
        self._pushed[host] = asyncio.get_running_loop().time()
        reader = asyncio.create_task(self._read(host, request_iterator, outbox))
        try:
            yield first
            yield agent_pb2.SchedulerMessage(ack=agent_pb2.Ack(acked_seq=await self.engine.durable_acked(host)))
            while isinstance(message := await outbox.next(), (bytes, agent_pb2.SchedulerMessage)):
                yield message
                if type(message) is not bytes:
                    outbox.sent_ack(message.ack.acked_seq)
            if isinstance(message, Refused):
                await abort(self.engine, context, message)
        finally:
            reader.cancel()
            if self._outboxes.get(host) is outbox:
                del self._outboxes[host]
                self._ended[host] = time.monotonic()
                self.metrics.agents_live.set(len(self._outboxes))

    async def _hello(self, request_iterator: AsyncIterator, context: grpc.aio.ServicerContext) -> str:
        error = None
        if not self.engine.ready:
            error = not_ready(self.engine)
        else:
            first = await anext(aiter(request_iterator), None)
            host = first.hello.host_id if first is not None and first.WhichOneof("body") == "hello" else ""
            if host not in self.engine.read().state.workers:
                error = Refused("UNREGISTERED_AGENT", f"host {host!r} has not registered; the first message "
                                                      "of a stream must be a Hello from a registered host")
            elif host in self._outboxes:
                error = Refused("HOST_STREAMING", f"host {host!r} is live on another stream; a host streams on "
                                                  "one at a time (close that one first)")
        if error is not None:
            await abort(self.engine, context, error)
        return host

    async def _read(self, host: str, request_iterator: AsyncIterator, outbox: Outbox) -> None:
        """Check, count and queue each batch as it arrives: while the ledger
        writes one, the next is already checked and folded. With IN_FLIGHT
        batches waiting for durability, with max_unacked_windows not yet
        acknowledged to the agent, or past the principal's window rate, the
        stream reads no further (flow control holds the agent back);
        `_acknowledge` answers them, and a refusal, in arrival order."""
        pending: asyncio.Queue = asyncio.Queue(IN_FLIGHT)
        acknowledging = asyncio.create_task(self._acknowledge(pending, outbox))
        who = caller()
        principal = who.name
        try:
            end: object = True
            try:
                async for message in request_iterator:
                    if message.WhichOneof("body") != "batch":
                        continue
                    size = len(message.batch.windows)
                    evidence.sized(size, self.limits)
                    await outbox.reserve(size)
                    await self._rates.paced(principal, size)
                    # past its receipts per hour, the stream is paused as past its rate: never refused
                    while (wait := self.admission.receipts_wait_s(who, time.monotonic())) > 0:
                        await asyncio.sleep(wait)
                    await pending.put(await self._count(host, message.batch))
            except Refused as error:
                end = error
            except ReceiptTooLarge as error:
                end = too_large(error)
            except LedgerFailed as error:
                end = Refused("LEDGER_UNAVAILABLE", str(error))
            except grpc.aio.AioRpcError:
                pass   # the agent went away; it resends above its last ack
            await pending.put(end)
            await acknowledging
        finally:
            acknowledging.cancel()
            outbox.finish()   # for an end `_acknowledge` did not reach

    async def _count(self, host: str, batch: agent_pb2.WindowBatch) -> Counting:
        """Check a batch and count its new windows. A host not yet live becomes
        live first."""
        windows, versions, mean_uw = batch_columns(batch)
        counting = self.engine.record_windows(host, partial(self._checked, host, windows, versions, mean_uw, False),
                                              time.time_ns())
        if counting is None:   # new windows from a host not yet live
            await self._set_live(host, True)
            counting = self.engine.record_windows(host, partial(self._checked, host, windows, versions, mean_uw, True),
                                                  time.time_ns())
        self.metrics.duplicate_windows.inc(len(windows.seq) - counting.windows)
        return counting

    def _checked(self, host: str, windows: Windows, versions: list[int], mean_uw: list[int | None], live: bool,
                 latest: ServiceState) -> Windows | None:
        """The batch's new windows on the latest state, once every rule passes
        (evidence.admit); None if there are some and the host is not live
        (unless `live`: it was just made live)."""
        meters = self.meters.get(host, [])
        current, opened = latest.occupancy_seq.get(host, 0), self._opened.get(host, 0)
        context = evidence.Context(
            host, evidence.device_types(meters), frozenset(m.device_id for m in meters
                                                           if m.kind == types_pb2.CPU_PACKAGE),
            counted(latest.kernel, host), latest.window_ends.get(host, {}), time.time_ns(), self.limits,
            lambda v: self.engine.occupancies.find(latest.kernel, host, v, current, opened))
        fresh = evidence.admit(context, windows, versions, mean_uw)[0]
        return None if fresh.seq and not live and not latest.kernel.workers[host].live else fresh

    async def _acknowledge(self, pending: asyncio.Queue, outbox: Outbox) -> None:
        """Ack each counted batch once it is durable (those before it are then
        too), in order; then pass on how the stream ends."""
        while isinstance(item := await pending.get(), Counting):
            if item.durable is not None:
                try:
                    await item.durable
                except LedgerFailed as error:
                    item = Refused("LEDGER_UNAVAILABLE", str(error))
                    break
                self.metrics.windows.inc(item.windows)
            outbox.acknowledge(item.acked, item.windows)
        outbox.finish(item if isinstance(item, Refused) else True)

    async def _set_live(self, host: str, live: bool) -> None:
        if self.engine.failed is None:
            await self.engine.decide(lambda latest: [WorkerLiveness(host, live)] if (
                (worker := latest.kernel.workers.get(host)) is not None and worker.live != live) else [], time.time_ns())

    def _push_occupancy(self, change: Change) -> None:
        """Note the hosts a commit changed; push each once the event loop has
        run what is ready (however many commits touched it meanwhile), or
        OCCUPANCY_EVERY_S after its last push if that is later."""
        if change.workers:
            self._dirty |= change.workers
            self._flush_at(min(map(self._next_push, change.workers)))

    def _flush_occupancy(self) -> None:
        """Push the changed hosts whose last push is OCCUPANCY_EVERY_S old, and
        come back when the next of the others is."""
        self._flush = None
        now = asyncio.get_running_loop().time()
        due = {host for host in self._dirty if host not in self._outboxes or self._next_push(host) <= now}
        for host in due & self._outboxes.keys():
            self._outboxes[host].push(self._occupancy(host))
            self._pushed[host] = now
        self._dirty -= due
        if self._dirty:
            self._flush_at(min(map(self._next_push, self._dirty)))

    def _flush_at(self, when: float) -> None:
        """_flush_occupancy at `when` (loop.time()), or at once if that is past,
        unless it is due sooner already."""
        loop = asyncio.get_running_loop()
        when = max(when, loop.time())
        if self._flush is None or self._flush.when() > when:
            if self._flush is not None:
                self._flush.cancel()
            self._flush = loop.call_at(when, self._flush_occupancy)

    def _next_push(self, host: str) -> float:
        """When (loop.time()) the host's occupancy may be pushed again."""
        return self._pushed.get(host, -math.inf) + OCCUPANCY_EVERY_S

    def _occupancy(self, host: str) -> bytes:
        """As committed (an agent never splits energy for an admission a crash could
        take back); sending it supersedes the older versions (evidence.py).
        Encoded as `occupancy` would make it (occupancy_wire.py)."""
        committed = self.engine.read()
        version = committed.occupancy_seq.get(host, 0)
        self.engine.occupancies.sent(host, version, time.time_ns())
        return self._wire.message(committed.state, host, self.meters.get(host, []), version,
                                  self.engine.observed.holders(committed.state, host))


def occupancy(state: ClusterState, host: str, meters: list[types_pb2.DeviceMeter], version: int,
              holders: Callable[[ClusterState, str], Mapping[str, Mapping[str, int]]] = occupants
              ) -> agent_pb2.Occupancy:
    """Who occupies each device of a host: GPU holders by milli-device, and on
    each CPU package every claim with reserved CPU, by cpu_millis (RULES §2).
    `holders`: occupants, or the engine's cache of it (occupancy.Holders).
    The plain twin of what a stream sends (OccupancyWire.message, its encoding)."""
    worker, held = state.workers[host], holders(state, host)
    out = agent_pb2.Occupancy(version=version)
    for device in worker.devices:
        out.devices.add(device_id=device.device_id, capacity=MDEV_PER_DEVICE, occupants=held.get(device.device_id, {}))
    for meter in meters:
        if meter.kind == types_pb2.CPU_PACKAGE:
            out.devices.add(device_id=meter.device_id, capacity=worker.cpu_millis, occupants=held.get(CPU_PREFIX, {}))
    return out


def _check_registration(request: agent_pb2.RegisterRequest) -> None:
    """Every field bounded, every enum one the contract names."""
    if not NAME.fullmatch(request.host_id):
        raise Refused("INVALID_ARGUMENT", f"host_id: a host id must match {NAME_RULE}")
    if len(request.devices) > MAX_DEVICES:
        raise Refused("INVALID_ARGUMENT", f"devices: at most {MAX_DEVICES} devices per host")
    ids = [d.device_id for d in request.devices]
    if len(set(ids)) != len(ids) or not all(map(NAME.fullmatch, ids)):
        raise Refused("INVALID_ARGUMENT", f"devices: every device needs a distinct id matching {NAME_RULE}")
    gpus = sum(d.kind == types_pb2.GPU for d in request.devices)
    if request.capacity.resources.gpu_mdev > gpus * MDEV_PER_DEVICE:
        raise Refused("INVALID_ARGUMENT", f"capacity.resources.gpu_mdev: {request.capacity.resources.gpu_mdev} is "
                                          f"more than the host's {gpus} GPUs hold ({MDEV_PER_DEVICE} a GPU)")
    for i, device in enumerate(request.devices):
        if len(device.device_type) > MAX_GPU_TYPE_CHARS:
            raise Refused("INVALID_ARGUMENT", f"devices[{i}].device_type: at most {MAX_GPU_TYPE_CHARS} characters")
        for name, enum in (("kind", types_pb2.DeviceKind), ("meter", types_pb2.MeterKind),
                           ("grade", types_pb2.Grade)):
            convert.known(enum, getattr(device, name), f"devices[{i}].{name}")


def _registered(latest: ClusterState, worker: Worker, request: agent_pb2.RegisterRequest,
                meters: dict[str, list[types_pb2.DeviceMeter]]) -> list[WorkerRegistered]:
    """Register's change on the latest state: none when the host is registered
    as it is; else refused if it would drop a GPU an admitted claim holds.
    The host's meters are kept either way."""
    _check_devices_kept(latest, worker)
    _check_devices_own(latest, worker)
    meters[request.host_id] = list(request.devices)
    return [] if latest.workers.get(request.host_id) == worker else [WorkerRegistered(worker)]


def _check_devices_own(state: ClusterState, worker: Worker) -> None:
    """A GPU's id names one device on one host: a host may not register
    another host's GPU (its windows would be checked against, and its claims
    placed on, a device the other host's agent meters)."""
    mine = {d.device_id for d in worker.devices}
    for other in state.workers.values():
        taken = sorted(mine.intersection(d.device_id for d in other.devices)) if other.worker_id != worker.worker_id \
            else ()
        if taken:
            raise Refused("INVALID_ARGUMENT", f"devices: {taken[0]!r} is a GPU of host {other.worker_id!r}; a device "
                                              "id names one device, on one host")


def _check_devices_kept(state: ClusterState, worker: Worker) -> None:
    """A re-registration may not drop a GPU that an admitted claim holds."""
    kept = {d.device_id for d in worker.devices}
    load = state.loads.get(worker.worker_id)
    for claim_id in (load.active if load else ()):
        claim = state.claims[claim_id]
        dropped = sorted(d.device_id for d in claim.devices if d.device_id not in kept)
        if dropped and claim.state is ClaimState.ADMITTED:
            raise Refused("DEVICES_HELD", f"devices: {worker.worker_id!r} would drop {dropped[0]!r}, which claim "
                                          f"{claim_id!r} holds; release it first")


def add_to_server(servicer: AgentServicer, server: grpc.aio.Server) -> None:
    """agent_pb2_grpc.add_AgentServiceServicer_to_server, but Stream's occupancy
    pushes go out as the bytes OccupancyWire gives (what the generated
    serializer would make of the message `occupancy` builds)."""
    service = agent_pb2.DESCRIPTOR.services_by_name["AgentService"]
    handlers = {}
    for method in service.methods:
        make = _HANDLERS[method.client_streaming, method.server_streaming]
        serialize = GetMessageClass(method.output_type).SerializeToString
        handlers[method.name] = make(getattr(servicer, method.name),
                                     request_deserializer=GetMessageClass(method.input_type).FromString,
                                     response_serializer=_as_encoded if method.server_streaming else serialize)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)


_HANDLERS = {(False, False): grpc.unary_unary_rpc_method_handler, (False, True): grpc.unary_stream_rpc_method_handler,
             (True, False): grpc.stream_unary_rpc_method_handler, (True, True): grpc.stream_stream_rpc_method_handler}


def _as_encoded(message: bytes | agent_pb2.SchedulerMessage) -> bytes:
    return message if type(message) is bytes else message.SerializeToString()
