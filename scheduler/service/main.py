"""pool-scheduler: start-up, serving and shutdown.

Start-up order is the rule of RULES §9: the gRPC server (health only,
NOT_SERVING) comes up first so that probes get an answer; then the ledger is
verified and replayed; the configuration is recorded if it changed; only then
does health say SERVING and systemd hear READY=1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import resource
import signal
import sys
import time
from pathlib import Path
from typing import NoReturn

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from protos import daemon
from protos.pool.v1 import ops_pb2_grpc, proofs_pb2_grpc
from protos.settings import ConfigError
from scheduler.kernel import EventError, WorkerLiveness, period_roll
from scheduler.ledger.fold import CheckpointMismatch, Unfoldable
from scheduler.ledger.keys import KeyFileError, load_signing_key
from scheduler.ledger.sqlite import SqliteStore
from scheduler.ledger.steward import Steward
from scheduler.ledger.store import Store, StoreError, StoreFull, probe
from scheduler.ledger.verify import LedgerInvalid
from scheduler.ledger.writer import GroupCommitWriter
from scheduler.service import config as configuration
from scheduler.service import agents as agents_service
from scheduler.service.agents import AgentServicer
from scheduler.service.authz import Authorizer
from scheduler.service import claims as claims_service
from scheduler.service.claims import ClaimsServicer
from scheduler.service.config import SchedulerConfig
from scheduler.service.drain import Drain
from scheduler.service.engine import Engine, LedgerFailed
from scheduler.service.errors import Refused
from scheduler.service.limits import Admission
from scheduler.service.metrics import SchedulerMetrics
from scheduler.service.ops import OperationsServicer
from scheduler.service.proofs import ProofsServicer
from scheduler.service.tls import ReloadableTls, TlsFileError

log = logging.getLogger("pool.scheduler")
SERVICES = ("pool.v1.Claims", "pool.v1.AgentService", "pool.v1.Operations", "")
TICK_S = 1.0             # how often the pending queue and the accounting period are looked at
RECONNECT_GRACE_S = 30   # a host with no stream for this long (since start-up, or its last) is marked not live
# allocations between young-generation collections (Python's default 700), and young collections
# between collections of the middle generation (default 10): young ones in small doses, the middle one
# as often as at (50,000, 20) before. At 50,000 the abuse soak (bench/abuse.py) saw a young collection
# every ~12 s free 12,000-36,000 objects in cycles at once, 74-135 ms with the GIL held, and every call
# in flight waited; at 5,000 they come every second or so and take 10-20 ms (docs/BENCHMARKS.md).
GC_THRESHOLD = 5_000
GC_MIDDLE = 200
PROBE_EVERY_S = 1.0     # while the ledger's disk is full, how often a test write is tried
WATCHDOG_EVERY_S = 5.0  # systemd's watchdog ping while standing by (the unit's WatchdogSec is 30 s)
STEPPED_DOWN = 3        # exit status of a leader that lost the shared ledger (restarted, it stands by)
# how long a leader that lost the ledger goes on refusing calls (NOT_LEADER, no leader named) before its
# port closes: clients still sending here are told to go elsewhere rather than find nothing listening
STEP_DOWN_ANSWERING_S = 1.0
DRAIN_PATIENCE_S = 3.0  # how long a stop lets unary calls in flight finish before it cuts them short (drain.py)

# what a stopping scheduler answers (drain.py): a new call, and a call in flight cut short
STOPPING = (Refused("SHUTTING_DOWN", "this scheduler is stopping and did nothing with this call; "
                                     "send it to another scheduler, or again once this one is back"),
            Refused("SHUTTING_DOWN", "this scheduler stopped before this call's outcome was known: it may "
                                     "or may not have been done; send the same request again"))
STEPPING_DOWN = (Refused("NOT_LEADER", "this scheduler lost the ledger and is stepping down; it cannot "
                                       "name the leader: try the other schedulers"),
                 Refused("LEDGER_UNAVAILABLE", "this scheduler lost the ledger before this call's outcome "
                                               "was known: it may or may not have been done; send the same "
                                               "request again"))


def tune_collector() -> None:
    """The replayed state is long-lived: keep it out of the collector's scans, and
    collect young objects less often (window batches and decisions allocate many
    short-lived ones). bench/kernel.py measures the kernel with the same setting."""
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, GC_MIDDLE, 20)


@contextlib.contextmanager
def collector_paused():
    """The collector off while a ledger is replayed, and what the replay built
    frozen out of its scans after (as tune_collector does). A replay builds
    millions of long-lived objects (a checkpoint's claims, then the state) and
    its garbage is freed by reference counting; left on, the collector walks
    everything built so far again and again as it grows: at 1M receipts and
    100,000 claims that was a third of start-up (docs/BENCHMARKS.md)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


class StartupError(Exception):
    """Start-up cannot go on: one line to log, and the exit status (2: a person
    must act, so systemd does not restart; 1: a restart may succeed)."""

    def __init__(self, message: str, exit_status: int = 2) -> None:
        super().__init__(message)
        self.exit_status = exit_status


# the shortest interval between a client's keepalive pings the server accepts on a quiet connection
# (it was 10 s: a client pinging every second during a Watch with nothing to say was cut off with
# "Too many pings" after three). The client library pings every second, so that a frozen
# scheduler is noticed within a lease and 2 s (docs/OPERATIONS.md, "High availability").
CLIENT_PING_MIN_MS = 500


def server_options(limits) -> list[tuple[str, int]]:
    """The gRPC server's stated limits ([limits], docs/OPERATIONS.md): message
    size, streams per connection, idle connections closed, dead peers found,
    and clients' keepalive pings (every CLIENT_PING_MIN_MS at most) permitted."""
    return [("grpc.max_receive_message_length", limits.max_message_bytes),
            ("grpc.max_send_message_length", limits.max_message_bytes),
            ("grpc.max_concurrent_streams", limits.max_streams_per_connection),
            ("grpc.max_connection_idle_ms", limits.connection_idle_s * 1000),
            ("grpc.keepalive_time_ms", limits.keepalive_s * 1000),
            ("grpc.keepalive_timeout_ms", 20_000),
            # (despite its name, gRPC's GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS: pings received)
            ("grpc.http2.min_ping_interval_without_data_ms", CLIENT_PING_MIN_MS),
            ("grpc.keepalive_permit_without_calls", 1)]


# calls gRPC may hold beyond the pools: those being refused before they are counted (an
# undeclared CN, a call without a certificate)
REFUSING = 1_024


def pools(limits) -> dict[str, int]:
    """Calls in progress per role pool (limits.Admission): tenants, auditors and witnesses share
    max_concurrent_rpcs; agents, operators and health keep pools of their own."""
    return {"clients": limits.max_concurrent_rpcs, "agent": limits.agent_rpcs,
            "operator": limits.operator_rpcs, "health": limits.health_rpcs}


def raise_file_limit() -> None:
    """Every connection is a file: take the hard limit, as Go does, so that a
    soft limit of 1,024 is not what stops the scheduler answering (the unit
    sets LimitNOFILE as well)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def exit_status(failure: BaseException) -> int:
    """A ledger failure's exit status: 2 when restarting cannot help."""
    return 2 if isinstance(failure, StoreError) and failure.needs_operator else 1


def store_failed(exc: StoreError) -> StartupError:
    return StartupError(f"{exc.code}: {exc}", exit_status(exc))


def open_and_replay(config: SchedulerConfig, engine: Engine, accept_loss: bool = False,
                    store: Store | None = None) -> Steward:
    """Open, test-write, verify and replay the scheduler's ledger into `engine` (the
    ledger's own opening, for any program, is steward.open_ledger): the SQLite file, or the
    shared `store` (PostgreSQL, service/leader.py). StoreFull (before anything
    is replayed) when the test write finds the disk full, for the caller to wait;
    with a shared store, a StoreError that waiting may mend (PostgreSQL away)
    as it is, for leader.py to try again; every other failure as a StartupError
    naming it."""
    try:
        key = load_signing_key(config.ledger.steward_key)
    except KeyFileError as exc:
        hint = "" if config.ledger.steward_key.exists() else " (create one with `poolctl keygen`)"
        raise StartupError(f"steward key: {exc}{hint}") from None
    path = config.ledger.path if store is None else "in PostgreSQL"
    shared = store is not None
    try:
        if store is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            store = SqliteStore(path, create=True)
    except OSError as exc:
        raise StartupError(f"LEDGER_READ_ONLY: cannot create {path.parent}: {exc.strerror}") from None
    except StoreError as exc:
        raise store_failed(exc) from None
    try:
        probe(store)
        with collector_paused():
            return Steward.open(store, key, engine.ledger_fold(), accept_loss=accept_loss)
    except StoreFull:
        store.close()
        raise
    except (LedgerInvalid, CheckpointMismatch, Unfoldable) as exc:
        store.close()
        raise StartupError(f"LEDGER_INVALID: ledger {path} does not verify: {exc}") from None
    except StoreError as exc:
        if shared and not exc.needs_operator:
            raise   # PostgreSQL went away before anything was folded: leader.py tries again (reads wait)
        store.close()
        raise store_failed(exc) from None
    except BaseException:
        if not shared:
            store.close()
        raise


class Scheduler:
    def __init__(self, config: SchedulerConfig, accept_ledger_loss: bool = False) -> None:
        self.config = config
        self.accept_ledger_loss = accept_ledger_loss
        self.metrics = SchedulerMetrics()
        self.engine = Engine(config.splits_retention, config.ledger.checkpoint_every)
        self.engine.witness_keys = configuration.trusted_witnesses(config)
        self.health = HealthServicer()
        self.agents = AgentServicer(self.engine, config, self.metrics)
        self.admission = Admission(pools(config.limits))
        self.authorizer = Authorizer(configuration.principals(config), insecure=config.server.insecure,
                                     state=lambda: self.engine.read().state if self.engine.ready else None,
                                     on_refused=lambda code: self.engine.on_refused(code), admission=self.admission)
        self.engine.on_receipts = lambda principal, n: self.admission.receipts(principal, n, time.monotonic())
        self.agents.admission = self.admission
        self.tls = ReloadableTls(config.server.tls) if config.server.tls else None
        self.drain = Drain(on_refused=lambda code: self.engine.on_refused(code))
        # gRPC's own cap sits above every pool together, so that no pool can fill it
        self.server = grpc.aio.server(interceptors=[self.drain, self.authorizer], options=server_options(config.limits),
                                      maximum_concurrent_rpcs=sum(pools(config.limits).values()) + REFUSING)
        self.claims = ClaimsServicer(self.engine, config.limits)
        self.warming: asyncio.Task | None = None   # claims.warm_listing, once serving
        self.keeping: asyncio.Task | None = None   # engine.keep_encoded, once serving
        self.claims.admission = self.admission
        claims_service.add_to_server(self.claims, self.server)   # List's pages sent as listing.py encodes them
        agents_service.add_to_server(self.agents, self.server)   # occupancy sent as occupancy_wire.py encodes it
        operations = OperationsServicer(self.engine, self.agents, config.limits)
        ops_pb2_grpc.add_OperationsServicer_to_server(operations, self.server)
        proofs_pb2_grpc.add_ProofsServicer_to_server(ProofsServicer(self.engine), self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.engine.on_event = self.metrics.count
        self.engine.on_refused = lambda code: self.metrics.refusals.labels(code).inc()
        self.engine.listen(lambda change: self.metrics.ledger_length.set(self.engine.writer.steward.length))
        self.metrics.watch_state(lambda: self.engine.read().state, lambda: self.engine.read().pending_reason,
                                 lambda: self.engine.observed)
        self.metrics.watch_views(operations.verdicts, self._witness_lag)
        # a shared ledger: a leader and standbys (service/leader.py); SQLite is always its own leader
        self.leadership = None
        if config.ledger.store == "postgresql":
            from scheduler.service.leader import Leadership   # psycopg (a third of start-up's imports) only then
            self.leadership = Leadership(config, self.metrics)

    def _witness_lag(self) -> int | None:
        """Receipts not yet covered by a witness statement (None before the ledger is open)."""
        writer = self.engine.writer
        if writer is None:
            return None
        info = writer.steward.info()
        return info.length - info.witnessed_length

    async def _set_health(self, status: int) -> None:
        for service in SERVICES:
            await self.health.set(service, status)

    def _listen(self) -> None:
        listen = self.config.server.listen
        if self.tls is None:   # config.validate allows this only on loopback
            log.warning("INSECURE MODE: plaintext on %s and every caller is an operator; "
                        "for development only (docs/OPERATIONS.md, Security)", listen)
            self.metrics.insecure.set(1)
            port = self.server.add_insecure_port(listen)
        else:
            port = self.server.add_secure_port(listen, self.tls.credentials())
        if not port:
            raise StartupError(f"cannot listen on {listen}")

    def reload(self, path: Path) -> None:
        """SIGHUP: [principals], [ledger] witness_keys and the TLS files, read
        again; anything wrong leaves what is in force and says why."""
        try:
            config = configuration.load(path)
            if self.tls is not None and config.server.tls is not None:
                self.tls.reload(config.server.tls)
        except (ConfigError, TlsFileError) as exc:
            log.error("reload refused, nothing changed: %s", exc)
            return
        self.authorizer.revise(configuration.principals(config))   # open streams it no longer admits end now
        self.engine.witness_keys = configuration.trusted_witnesses(config)
        log.info("reloaded %s: %d principals, %d witness keys%s", path, len(config.principals),
                 len(self.engine.witness_keys), ", TLS files" if self.tls else "")

    async def start(self) -> None:
        self._listen()
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.server.start()
        if self.config.server.metrics:
            self.metrics.serve(self.config.server.metrics)
        started = time.monotonic()
        if self.leadership is None:
            steward = await self._open_ledger()
        else:
            self.metrics.leader.set(0)
            self.engine.not_leader = self.leadership.refusal
            daemon.ready("standby: following the ledger")
            # a replay or a read waiting for PostgreSQL runs in a thread: the loop tells systemd it lives
            alive = asyncio.create_task(_watchdog())
            try:
                steward = await self.leadership.acquire(
                    lambda store: open_and_replay(self.config, self.engine, self.accept_ledger_loss, store))
            except StoreError as exc:
                raise StartupError(f"no longer the leader of the ledger ({exc}): stepping down without writing",
                                   STEPPED_DOWN) from None
            finally:
                alive.cancel()
            self.engine.not_leader = None
        self.metrics.leader.set(1)
        self.engine.start(GroupCommitWriter(steward))
        tune_collector()
        # a standby's replay was its first turn, long before it leads: the time it took then
        replayed_s = time.monotonic() - started if self.leadership is None else self.leadership.replayed_s
        self.metrics.replay_seconds.set(replayed_s)
        self.metrics.ledger_length.set(steward.length)
        log.info("ledger %s verified and replayed: %d receipts in %.2f s",
                 self.config.ledger.path if self.leadership is None else "in PostgreSQL",
                 steward.length, replayed_s)
        config_event = self.config.config_event()
        changed = self.engine.read().state.config_digest != config_event.digest   # replayed: all durable
        try:   # deciding even with nothing new judges everything that could move (and rolls a period passed)
            await self.engine.decide([config_event] if changed else [], time.time_ns())
        except EventError as exc:
            raise StartupError(f"the configuration cannot replace the one in the ledger: {exc}") from None
        except LedgerFailed as exc:
            failure = self.engine.failed if self.engine.failed is not None else exc.__cause__
            raise (store_failed(failure) if isinstance(failure, StoreError)
                   else StartupError(f"LEDGER_UNAVAILABLE: {failure}", 1)) from None
        if changed:
            log.info("configuration recorded (digest %s)", config_event.digest.hex()[:16])
        self.agents.started = time.monotonic()   # agents could not connect before: their grace starts now
        self.claims.open.rebuild(self.engine.read().state)
        self.engine.ready = True
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)
        daemon.ready(f"serving on {self.config.server.listen}")
        log.info("serving on %s", self.config.server.listen)
        # the open claims' List statuses encoded between calls, not on the first List's path
        self.warming = asyncio.create_task(self.claims.warm_listing())
        # the checkpoint's encodings kept up to date between calls, not all at the checkpoint
        self.keeping = asyncio.create_task(self.engine.keep_encoded())

    async def _open_ledger(self) -> Steward:
        """open_and_replay; while the ledger's disk is full, health stays NOT_SERVING
        (systemd told why, and that start-up goes on) and the test write is
        tried again every PROBE_EVERY_S, so the scheduler serves once space is
        freed, without a restart. Said once in the log, and once when it ends."""
        loop = asyncio.get_running_loop()
        waiting_since: float | None = None
        while True:
            try:
                steward = await loop.run_in_executor(None, open_and_replay, self.config, self.engine,
                                                     self.accept_ledger_loss)
            except StoreFull as exc:
                if waiting_since is None:
                    waiting_since = time.monotonic()
                    self.engine.waiting_for = f"{exc.code}: {exc}"
                    log.error("%s: %s; NOT_SERVING until a test write succeeds (tried every %.0f s)",
                              exc.code, exc, PROBE_EVERY_S)
                daemon.notify(f"EXTEND_TIMEOUT_USEC={int(4 * PROBE_EVERY_S * 1e6)}")
                daemon.status(f"waiting: {exc.code}: {exc}")
                daemon.watchdog()
                await asyncio.sleep(PROBE_EVERY_S)
                continue
            self.engine.waiting_for = None
            if waiting_since is not None:
                log.warning("the ledger can be written again after %.0f s", time.monotonic() - waiting_since)
            return steward

    async def tick(self) -> None:
        """Periodic work: admit what time alone makes admissible (a new accounting
        period), mark agents that did not come back after a restart not live,
        and ping the watchdog."""
        while True:
            await asyncio.sleep(TICK_S)
            if self.engine.failed is not None:
                return
            daemon.watchdog()
            if period_roll(self.engine.read().state, time.time_ns()) is not None:
                await self.engine.decide([], time.time_ns())
            await self._mark_absent_agents()

    async def _mark_absent_agents(self) -> None:
        await self.engine.decide(lambda latest: [WorkerLiveness(w, False) for w, worker in sorted(latest.kernel.workers.items())
                                                 if worker.live and self.agents.absent_s(w) > RECONNECT_GRACE_S],
                                 time.time_ns())

    async def stop(self, answering_s: float = 0.0, answers: tuple[Refused, Refused] = STOPPING) -> None:
        """NOT_SERVING; then every call ends with a status, never CANCELLED
        (drain.py): new calls are refused with answers[0], streams and calls
        still running after DRAIN_PATIENCE_S are cut short with answers[1];
        the refusals go on for `answering_s` and while the ledger is closed.
        grpc's server is not stopped: its shutdown cancels any call that
        reaches it in that instant (one in 20 PostgreSQL restarts under load,
        bench/failover.py), so the process leaves instead (`leave`), and
        clients see its connections close: UNAVAILABLE."""
        daemon.stopping()
        for task in (self.warming, self.keeping):
            if task is not None:
                task.cancel()
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.drain.close(*answers, DRAIN_PATIENCE_S)
        await asyncio.sleep(answering_s)
        if self.engine.writer is not None:
            await self.engine.writer.close()
            self.engine.writer.steward.close()


async def _watchdog() -> None:
    while True:
        daemon.watchdog()
        await asyncio.sleep(WATCHDOG_EVERY_S)


def leave(status: int) -> NoReturn:
    """Exit now, the log flushed, without stopping grpc's server (Scheduler.stop
    says why): the kernel closes its connections."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


async def serve(config: SchedulerConfig, path: Path, accept_ledger_loss: bool = False) -> int:
    try:
        scheduler = Scheduler(config, accept_ledger_loss)
    except TlsFileError as exc:
        log.error("%s", exc)
        return 2
    leave(await _serve(scheduler, path))


async def _serve(scheduler: Scheduler, path: Path) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    loop.add_signal_handler(signal.SIGHUP, scheduler.reload, path)
    stopped = asyncio.create_task(stop.wait())
    starting = asyncio.create_task(scheduler.start())   # a standby waits here until it leads
    await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        if scheduler.leadership is not None:
            scheduler.leadership.close()   # a replay or a read waiting for PostgreSQL ends in its thread
        await scheduler.stop()
        return 0
    try:
        starting.result()
    except StartupError as exc:
        log.error("%s", exc)
        await scheduler.stop()
        return exc.exit_status
    ticker = asyncio.create_task(scheduler.tick())
    tasks = {ticker, stopped}
    if scheduler.leadership is not None:
        tasks.add(scheduler.leadership.lost)
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    lost = next((t.result() for t in done if t not in (ticker, stopped)), None)
    if lost is not None and scheduler.engine.failed is None:
        scheduler.engine.failed = lost      # nothing more is queued to the ledger
    for task in tasks:
        task.cancel()   # (the lease too: a leader that stops closes its session, and the lock goes at once)
    if scheduler.leadership is not None and scheduler.engine.failed is not None:
        log.error("no longer the leader of the ledger (%s): stepping down without writing",
                  scheduler.engine.failed)
        await scheduler.stop(STEP_DOWN_ANSWERING_S, STEPPING_DOWN)
        return STEPPED_DOWN
    await scheduler.stop()
    return 0 if scheduler.engine.failed is None else exit_status(scheduler.engine.failed)


# How long a thread holding the GIL runs before one waiting for it takes its turn (Python's default:
# 5 ms). The event loop serves every call; the ledger's sign and store threads and the plan thread
# (claims.py) are throughput work beside it. With 5 ms the loop, woken by a call, waited up to 5 ms
# for the GIL at each wake-up while one of them ran: an honest Submit's p99 beside Plans of 1,000
# was 212-248 ms, with 1 ms 106-153 ms (bench/abuse.py --only plan; docs/BENCHMARKS.md).
GIL_SWITCH_S = 0.001


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="pool-scheduler", description="Pool's central scheduler.")
    parser.add_argument("--config", type=Path, default=configuration.DEFAULT_PATH)
    parser.add_argument("--check", action="store_true", help="validate the configuration and exit")
    parser.add_argument("--accept-ledger-loss", action="store_true",
                        help="start although the ledger holds fewer receipts than its head record says were "
                             "durable, and record that loss in the ledger (docs/OPERATIONS.md: use once, by hand)")
    args = parser.parse_args(argv)
    try:
        config = configuration.load(args.config)
    except ConfigError as exc:
        print(f"pool-scheduler: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if args.check:
        print(f"{args.config}: valid ({len(config.tenants)} tenants, {len(config.work_classes)} work classes)")
        return
    daemon.setup_logging(config.server.log_level)
    raise_file_limit()
    sys.setswitchinterval(GIL_SWITCH_S)
    raise SystemExit(asyncio.run(serve(config, args.config, args.accept_ledger_loss)))


if __name__ == "__main__":
    main()
