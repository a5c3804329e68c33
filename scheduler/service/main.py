"""pool-scheduler: start-up, serving and shutdown.

Start-up order is the rule of RULES §9: the gRPC server (health only,
NOT_SERVING) comes up first so that probes get an answer; then the ledger is
verified and replayed; the configuration is recorded if it changed; only then
does health say SERVING and systemd hear READY=1.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from protos import daemon
from protos.pool.v1 import agent_pb2_grpc, claims_pb2_grpc, ops_pb2_grpc
from protos.settings import ConfigError
from scheduler.kernel import EventError, WorkerLiveness, period_roll
from scheduler.ledger.fold import Fold
from scheduler.ledger.keys import KeyFileError, load_signing_key
from scheduler.ledger.sqlite import SqliteStore
from scheduler.ledger.steward import Steward
from scheduler.ledger.verify import LedgerInvalid
from scheduler.ledger.writer import GroupCommitWriter
from scheduler.service import config as configuration
from scheduler.service.agents import AgentServicer
from scheduler.service.claims import ClaimsServicer
from scheduler.service.config import SchedulerConfig
from scheduler.service.engine import Engine
from scheduler.service.metrics import SchedulerMetrics
from scheduler.service.ops import OperationsServicer

log = logging.getLogger("pool.scheduler")
SERVICES = ("pool.v1.Claims", "pool.v1.AgentService", "pool.v1.Operations", "")
TICK_S = 1.0             # how often the pending queue and the accounting period are looked at
RECONNECT_GRACE_S = 30   # after start-up, agents that have not come back are marked not live
GC_THRESHOLD = 50_000   # allocations between young-generation collections (default 700)


def tune_collector() -> None:
    """The replayed state is long-lived: keep it out of the collector's scans, and
    collect young objects less often (window batches and decisions allocate many
    short-lived ones). bench/kernel.py measures the kernel with the same setting."""
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 20, 20)


class StartupError(Exception):
    pass


def open_ledger(config: SchedulerConfig, engine: Engine) -> Steward:
    try:
        key = load_signing_key(config.ledger.steward_key)
    except KeyFileError as exc:
        raise StartupError(f"steward key: {exc} (create one with `poolctl keygen`)") from None
    config.ledger.path.parent.mkdir(parents=True, exist_ok=True)
    store = SqliteStore(config.ledger.path, create=True)
    try:
        return Steward.open(store, key, Fold(engine.replay_entry, engine, restore=engine.restore))
    except LedgerInvalid as exc:
        store.close()
        raise StartupError(f"ledger {config.ledger.path} does not verify: {exc}") from None
    except BaseException:
        store.close()
        raise


class Scheduler:
    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.metrics = SchedulerMetrics()
        self.engine = Engine(config.splits_retention, config.ledger.checkpoint_every)
        self.health = HealthServicer()
        self.agents = AgentServicer(self.engine, config, self.metrics)
        self.server = grpc.aio.server()
        claims_pb2_grpc.add_ClaimsServicer_to_server(ClaimsServicer(self.engine), self.server)
        agent_pb2_grpc.add_AgentServiceServicer_to_server(self.agents, self.server)
        ops_pb2_grpc.add_OperationsServicer_to_server(OperationsServicer(self.engine, self.agents), self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.engine.on_event = self.metrics.count
        self.engine.on_refused = lambda code: self.metrics.refusals.labels(code).inc()
        self.engine.listen(lambda change: self.metrics.ledger_length.set(self.engine.writer.steward.length))
        self.metrics.watch_state(lambda: self.engine.committed.state, lambda: self.engine.committed.pending_reason)

    async def _set_health(self, status: int) -> None:
        for service in SERVICES:
            await self.health.set(service, status)

    async def start(self) -> None:
        if not self.server.add_insecure_port(self.config.server.listen):
            raise StartupError(f"cannot listen on {self.config.server.listen}")
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.server.start()
        if self.config.server.metrics:
            self.metrics.serve(self.config.server.metrics)
        started = time.monotonic()
        steward = await asyncio.get_running_loop().run_in_executor(None, open_ledger, self.config, self.engine)
        self.engine.start(GroupCommitWriter(steward))
        tune_collector()
        self.metrics.replay_seconds.set(time.monotonic() - started)
        self.metrics.ledger_length.set(steward.length)
        log.info("ledger %s verified and replayed: %d receipts in %.2f s", self.config.ledger.path,
                 steward.length, time.monotonic() - started)
        config_event = self.config.config_event()
        changed = self.engine.state.config_digest != config_event.digest
        try:   # deciding even with nothing new gives every pending claim its reason again
            await self.engine.decide([config_event] if changed else [], time.time_ns())
        except EventError as exc:
            raise StartupError(f"the configuration cannot replace the one in the ledger: {exc}") from None
        if changed:
            log.info("configuration recorded (digest %s)", config_event.digest.hex()[:16])
        self.engine.ready = True
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)
        daemon.ready(f"serving on {self.config.server.listen}")
        log.info("serving on %s", self.config.server.listen)

    async def tick(self) -> None:
        """Periodic work: admit what time alone makes admissible (a new accounting
        period), mark agents that did not come back after a restart not live,
        and ping the watchdog."""
        started = time.monotonic()
        while True:
            await asyncio.sleep(TICK_S)
            if self.engine.failed is not None:
                return
            daemon.watchdog()
            if period_roll(self.engine.state, time.time_ns()) is not None:
                await self.engine.decide([], time.time_ns())
            if time.monotonic() - started > RECONNECT_GRACE_S:
                await self._mark_absent_agents()

    async def _mark_absent_agents(self) -> None:
        absent = [w for w, worker in self.engine.state.workers.items() if worker.live and not self.agents.live(w)]
        if absent:
            await self.engine.decide([WorkerLiveness(w, False) for w in sorted(absent)], time.time_ns())

    async def stop(self) -> None:
        daemon.stopping()
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.server.stop(grace=2)
        if self.engine.writer is not None:
            await self.engine.writer.close()
            self.engine.writer.steward.close()


async def serve(config: SchedulerConfig) -> int:
    scheduler = Scheduler(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await scheduler.start()
    except StartupError as exc:
        log.error("%s", exc)
        await scheduler.server.stop(grace=0)
        return 2
    ticker = asyncio.create_task(scheduler.tick())
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({ticker, stopped}, return_when=asyncio.FIRST_COMPLETED)
    ticker.cancel()
    await scheduler.stop()
    return 1 if scheduler.engine.failed is not None else 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="pool-scheduler", description="Pool's central scheduler.")
    parser.add_argument("--config", type=Path, default=configuration.DEFAULT_PATH)
    parser.add_argument("--check", action="store_true", help="validate the configuration and exit")
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
    raise SystemExit(asyncio.run(serve(config)))


if __name__ == "__main__":
    main()
