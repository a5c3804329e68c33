"""What a call costs with a deep pending queue (issue 13), in one run, against
a real pool-scheduler subprocess on loopback:

  Submit p50 / p99 with 0, 1,000, 10,000 (and, without --quick, 100,000)
      claims pending (target: p99 at 10,000 <= 2 x p99 at 0),
  durable Submit rate with 16 in flight at each depth, as a ratio to the
      rate with none pending (target at 10,000: >= 80 %),
  Release p99 with the queue at depth, each release admitting a pending
      claim (target at 10,000: <= 20 ms),
  start-up at 1,000,000 receipts with 100,000 claims, from a checkpoint
      (target <= 10 s; --startup-receipts to change the size, 0 to skip).

The pending claims wait for a GPU: one host with 8 GPUs, each held by a
claim of a whole GPU, and every pending claim asks for a whole GPU too
(NO_ELIGIBLE_WORKER). They are written into the ledger before the scheduler
starts (with a checkpoint, so start-up is quick), exactly the receipts that
submitting them would have made. A measured Submit is a CPU-only claim of
another tenant, admitted at once; its client then releases it (not timed):
nothing it frees can admit a waiting claim. A measured Release ends the
claim holding a GPU, which admits the first waiting claim (the next one
released).

(Not bench/queue.py: with bench/ first on sys.path, as for every bench script,
a file of that name would stand in for the standard library's `queue`.)

The start-up ledger takes minutes to build (400-590 s at 1M receipts on a
2-core box): with --ledger-dir DIR it is built once into DIR (when DIR holds
none yet) and reused after, each start timed on a fresh copy of it (a start
writes: the first pass judges the claims submitted after the checkpoint), so a
start-up figure costs seconds. DIR keeps the sizes it was built for; --startup-
receipts/--startup-claims are then ignored (the figure's line says what DIR holds).

With --peer DIR (a checkout of other code, e.g. `git worktree add DIR COMMIT`),
that code's pool-scheduler (DIR first on PYTHONPATH, this venv's packages) is
started on a copy of the same ledger, in turn with this tree's, --rounds times.

Usage: .venv/bin/python bench/queue_depth.py [--quick] [--startup-receipts N] [--startup-claims N] [--startup-only]
                                             [--ledger-dir DIR] [--peer DIR ...] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from e2e import (BIN, GPUS, TENANTS, FakeAgent, closed_loop, configure, cpu_seconds, ms, registration, scheduler,
                 timed)  # bench/e2e.py
from ledger import fresh_schema, line                                                       # bench/ledger.py
from protos.pool.v1 import claims_pb2, claims_pb2_grpc, types_pb2
from scheduler import kernel
from scheduler.kernel import ClaimSpec, Resources, WorkerRegistered
from scheduler.ledger.keys import load_signing_key
from scheduler.ledger.sqlite import SqliteStore
from scheduler.ledger.steward import Steward, prepare
from scheduler.service import config as configuration
from scheduler.service.convert import worker_from
from scheduler.service.engine import Engine
from scheduler.service.state import ServiceState
from scheduler.service.windows.batch import WINDOWS, Windows, windows_body

ADMITTED = types_pb2.ClaimState.Value("ADMITTED")
HOST = "bench-0"
STARTUP_HOSTS = 200   # 64 cores each: the start-up ledger's 10,000 open claims fit with room
WAITING, MEASURED = TENANTS[0], TENANTS[1]


def gpu_claim(claim_id: str) -> ClaimSpec:
    return ClaimSpec(claim_id, WAITING, Resources(gpu_mdev=1000), estimate_uj=1)


class Builder:
    """Receipts straight into a ledger: the kernel's events as the service
    would record them, folded by an Engine as replay folds them (so that the
    checkpoint holds what a scheduler would have)."""

    def __init__(self, workdir: Path) -> None:
        config = configuration.load(workdir / "scheduler.toml")
        self.steward = Steward.open(SqliteStore(config.ledger.path, create=True),
                                    load_signing_key(config.ledger.steward_key))
        self.engine = Engine(config.splits_retention)
        self.service = ServiceState()   # what the engine has replayed
        self.state = kernel.ClusterState()   # ahead of the engine by what is not yet committed
        self.batch: list = []
        self.add([config.config_event()])

    def add(self, events) -> None:
        for event in events:
            self.state = kernel.apply(self.state, event)
            self.add_raw(event.kind, event.to_body())

    def add_raw(self, kind: str, body: dict) -> None:
        self.batch.append(prepare(kind, body))
        if len(self.batch) >= 5000:
            self.flush()

    def flush(self) -> None:
        for receipt in self.steward.commit(self.batch) if self.batch else ():
            self.service = self.engine.replayed(self.service, receipt.entry)
        self.batch = []

    def submit(self, specs) -> None:
        """ClaimSubmitted for each, as Submit records them, with no pass judging them."""
        for spec in specs:
            event = kernel.submit(self.state, spec)
            assert isinstance(event, kernel.ClaimSubmitted), event
            self.add([event])

    def decide(self) -> None:
        self.add(kernel.schedule(self.state, time.time_ns()).events)

    def checkpoint(self) -> None:
        self.flush()
        self.steward.checkpoint(self.engine.snapshot())

    def close(self) -> None:
        self.flush()
        self.steward.close()


def queue_ledger(workdir: Path, depth: int) -> None:
    """The host with every GPU held, and `depth` claims waiting for one."""
    build = Builder(workdir)
    build.add([WorkerRegistered(worker_from(registration(HOST), None))])
    build.submit(gpu_claim(f"hold-{i}") for i in range(GPUS))
    build.decide()
    assert all(build.state.claims[f"hold-{i}"].state is kernel.ClaimState.ADMITTED for i in range(GPUS))
    build.submit(gpu_claim(f"wait-{i}") for i in range(depth))   # judged by start-up's first pass
    build.checkpoint()
    build.close()


class Depth:
    def __init__(self, depth: int, startup_s: float, submit_seq, submit_conc, release) -> None:
        self.depth, self.startup_s = depth, startup_s
        self.submit_seq, self.submit_conc, self.release = submit_seq, submit_conc, release


async def measure(address: str, pid: int, depth: int, seconds: float) -> tuple:
    async with grpc.aio.insecure_channel(address) as channel:
        agent = FakeAgent(channel, HOST)
        await agent.connect()
        claims = claims_pb2_grpc.ClaimsStub(channel)

        def submit(prefix: str):
            return lambda i: claims.Submit(claims_pb2.SubmitRequest(
                claim_id=f"{prefix}-{i}", tenant=MEASURED, resources=types_pb2.Resources(cpu_millis=1),
                estimate_uj=1))

        def release(prefix: str):
            return lambda i: claims.Release(claims_pb2.ReleaseRequest(claim_id=f"{prefix}-{i}"))

        admitted = lambda status: status.state == ADMITTED   # noqa: E731
        sequential = await timed(pid, closed_loop(submit("seq"), admitted, seconds, 1, release("seq")))
        concurrent = await timed(pid, closed_loop(submit("conc"), admitted, seconds, 16, release("conc")))
        # each release frees a GPU, which admits the first waiting claim: the next one released
        order = [f"hold-{i}" for i in range(GPUS)] + [f"wait-{i}" for i in range(depth)]
        releases = await timed(pid, release_in_order(claims, order, seconds))
        await agent.close()
    return sequential, concurrent, releases


async def release_in_order(claims: claims_pb2_grpc.ClaimsStub, order: list[str], seconds: float
                           ) -> tuple[list[float], int]:
    """One at a time, for `seconds` or until `order` runs out."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    for claim_id in order:
        start = time.perf_counter()
        if start > deadline:
            break
        await claims.Release(claims_pb2.ReleaseRequest(claim_id=claim_id))
        latencies.append(time.perf_counter() - start)
    return latencies, len(latencies)


def startup_ledger(workdir: Path, receipts: int, claims: int) -> None:
    """`receipts` receipts holding `claims` claims of a core each, on hosts of
    64 cores: a tenth of the claims open, the rest released in the current
    (lifetime) period, so that a checkpoint keeps them all; the rest of the
    ledger is window batches from a host; the last checkpoint 1,000 receipts
    from the end, then more claims."""
    build = Builder(workdir)
    hosts = [registration(f"host-{h}") for h in range(STARTUP_HOSTS)]
    for host in hosts:
        host.capacity.resources.cpu_millis = 64_000
    build.add([WorkerRegistered(worker_from(host, None)) for host in hosts])
    now = time.time_ns()
    for at in range(0, claims, 1000):
        specs = [ClaimSpec(f"c-{i}", TENANTS[i % len(TENANTS)], Resources(cpu_millis=1000), estimate_uj=1)
                 for i in range(at, min(at + 1000, claims))]
        build.submit(specs)
        build.decide()
        build.add([kernel.release(build.state, s.claim_id, now) for i, s in enumerate(specs) if i % 10])
    devices = [d.device_id for d in hosts[0].devices]
    seq = 0
    while build.steward.length + len(build.batch) < receipts - 1000:
        seq += 1
        start = now + seq * 1_000_000_000
        build.add_raw(WINDOWS, windows_body(hosts[0].host_id, Windows(
            [devices[seq % len(devices)]], [seq], [start], [start + 1_000_000_000], [1000], ["HwShunt"], [1],
            ["unallocated"], [1000], ["HwShunt"])))
    build.checkpoint()
    build.submit(ClaimSpec(f"t-{i}", TENANTS[1], Resources(cpu_millis=1000), estimate_uj=1) for i in range(495))
    build.decide()
    build.close()


def ledger_length(path: Path) -> int:
    store = SqliteStore(path)
    try:
        return store.length()
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="depths up to 10,000, shorter phases")
    parser.add_argument("--startup-receipts", type=int, default=1_000_000, help="0: skip the start-up figure")
    parser.add_argument("--startup-claims", type=int, default=100_000)
    parser.add_argument("--startup-only", action="store_true", help="only the start-up figure")
    parser.add_argument("--ledger-dir", type=Path, help="keep the start-up ledger here: built once, reused after")
    parser.add_argument("--peer", type=Path, action="append", default=[],
                        help="another checkout (e.g. a git worktree of an older commit) whose start-up is timed "
                             "on the same ledger, alternating with this tree's")
    parser.add_argument("--rounds", type=int, default=1, help="starts of each tree (the figure is the median)")
    parser.add_argument("--postgres", metavar="DSN", help="also: the start-up ledger copied into a new schema of "
                        "this PostgreSQL database, a leader's start-up and a standby's catch-up on it")
    parser.add_argument("--tail", type=int, default=0, help="append this many window receipts to a copy of the "
                        "ledger first (a start replays up to checkpoint_every receipts after the last checkpoint)")
    parser.add_argument("--postgres-schema", metavar="DSN", help="as --postgres, on the copy an earlier run made "
                        "(the DSN it printed), instead of copying the ledger again")
    args = parser.parse_args()
    depths = () if args.startup_only else (0, 1_000, 10_000) if args.quick else (0, 1_000, 10_000, 100_000)
    seconds = 3.0 if args.quick else 8.0
    print(f"cores: {os.cpu_count()}   load average: {os.getloadavg()[0]:.2f}   "
          f"command: {shlex.join([sys.executable, *sys.argv])}")
    print("ratios: rates measured / the same at depth 0; latencies measured / budget")
    results = []
    for depth in depths:
        with tempfile.TemporaryDirectory(prefix="pool-queue-", dir=os.environ.get("BENCH_DIR")) as tmp:
            workdir = Path(tmp)
            start = time.perf_counter()
            with scheduler(workdir, prepare=lambda: queue_ledger(workdir, depth)) as (address, pid):
                startup_s = time.perf_counter() - start
                results.append(Depth(depth, startup_s, *asyncio.run(measure(address, pid, depth, seconds))))
        print(f"(depth {depth:,}: built and started in {startup_s:.1f} s)", flush=True)
    base = results[0] if results else None
    for r in results:
        line(f"Submit p50 / p99, {r.depth:,} pending", f"{ms(r.submit_seq.pct(0.5))} / {ms(r.submit_seq.pct(0.99))}",
             "p99 <= 2 x p99 at 0" if r.depth == 10_000 else "",
             r.submit_seq.pct(0.99) / (2 * base.submit_seq.pct(0.99)) if r.depth == 10_000 else None)
    for r in results:
        line(f"durable Submit rate, 16 in flight, {r.depth:,} pending", f"{r.submit_conc.rate:,.0f}/s",
             f"vs {base.submit_conc.rate:,.0f}/s at 0" + (" (>= 80 %)" if r.depth == 10_000 else ""),
             r.submit_conc.rate / base.submit_conc.rate)
    for r in results:
        line(f"Release p50 / p99 (admits one), {r.depth:,} pending",
             f"{ms(r.release.pct(0.5))} / {ms(r.release.pct(0.99))}", "p99 <= 20 ms" if r.depth else "",
             r.release.pct(0.99) / 0.020 if r.depth else None)
    if args.startup_receipts:
        startup(args)


def startup(args: argparse.Namespace) -> None:
    """Start-up from the last checkpoint: each tree (this one, then every
    --peer) started `--rounds` times in turn on a fresh copy of one ledger."""
    built_s = None
    if args.ledger_dir is not None and not (args.ledger_dir / BUILT).exists():
        built_s = build_startup_ledger(args.ledger_dir, args.startup_receipts, args.startup_claims)
    trees = [("this tree", None), *((str(p), p) for p in args.peer)]
    timings: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in trees}
    with tempfile.TemporaryDirectory(prefix="pool-startup-", dir=os.environ.get("BENCH_DIR")) as tmp:
        source = args.ledger_dir or Path(tmp) / "built"
        if args.ledger_dir is None:
            built_s = build_startup_ledger(source, args.startup_receipts, args.startup_claims)
        claims = int((source / BUILT).read_text().split()[1])
        if args.tail:
            source = lengthened(source, Path(tmp) / "tail", args.tail)
        length = ledger_length(source / "ledger.sqlite")
        for _ in range(args.rounds):
            for label, tree in trees:
                workdir = Path(tmp) / "run"
                shutil.copytree(source, workdir, ignore=shutil.ignore_patterns("scheduler.log", BUILT))
                # a peer's code first on the path: its pool-scheduler, with this venv's packages
                env = None if tree is None else {**os.environ, "PYTHONPATH": str(tree)}
                start = time.perf_counter()
                with scheduler(workdir, env=env) as (_, pid):   # Popen to SERVING, as an operator waits for it
                    timings[label].append((time.perf_counter() - start, cpu_seconds(pid)))
                shutil.rmtree(workdir)
        if args.postgres or args.postgres_schema:
            on_postgres(Path(tmp), source, args.postgres, f"{length:,} receipts, {claims:,} claims",
                        args.postgres_schema)
    if built_s is not None:
        print(f"(start-up ledger built in {built_s:.0f} s)")
    mine = statistics.median(wall for wall, _ in timings["this tree"])
    for label, _ in trees:
        walls, cpus = [w for w, _ in timings[label]], [c for _, c in timings[label]]
        each = ", ".join(f"{w:.2f}/{c:.2f}" for w, c in timings[label])
        print(f"({label}: wall/CPU s each start: {each})")
        line(f"start-up, {length:,} receipts, {claims:,} claims, from a checkpoint"
             + ("" if label == "this tree" else f" [{label}]"),
             f"{statistics.median(walls):.2f} s", "<= 10 s" if label == "this tree" else "this tree / it",
             statistics.median(walls) / 10 if label == "this tree" else mine / statistics.median(walls))
        # on a loaded shared box the wall clock waits for cores: what the start itself costs
        line("  its CPU (user + system) until serving", f"{statistics.median(cpus):.2f} s", "", None)


def lengthened(source: Path, workdir: Path, n: int) -> Path:
    """A copy of the ledger in `source` with `n` more window receipts of its
    first host after its tail, no checkpoint among them: a start then replays
    that much more (at most checkpoint_every receipts follow a checkpoint)."""
    shutil.copytree(source, workdir, ignore=shutil.ignore_patterns("scheduler.log"))
    engine = Engine(0)
    steward = Steward.open(SqliteStore(workdir / "ledger.sqlite"), load_signing_key(workdir / "steward.key"),
                           engine.ledger_fold(), workers=1)
    state = steward.state.kernel
    host = "host-0"
    devices = [d.device_id for d in state.workers[host].devices]
    seq, now, batch = kernel.counted(state, host), time.time_ns(), []
    for i in range(n):
        seq += 1
        start = now + i * 1_000_000_000
        batch.append(prepare(WINDOWS, windows_body(host, Windows(
            [devices[seq % len(devices)]], [seq], [start], [start + 1_000_000_000], [1000], ["HwShunt"], [1],
            ["unallocated"], [1000], ["HwShunt"]))))
        if len(batch) == 5000 or i == n - 1:
            steward.commit(batch)
            batch = []
    print(f"({n:,} receipts appended: {steward.since_checkpoint():,} after the last checkpoint)")
    steward.close()
    return workdir


COPY = 5000   # receipts per transaction when the ledger is copied into PostgreSQL
STANDING_BY = "standby: following the ledger"   # logged once its first replay is done (service/leader.py)


def to_postgres(source: Path, dsn: str) -> str:
    """The SQLite ledger in `source` copied receipt for receipt (the same signed
    bytes) into a new schema of `dsn`; that schema's DSN."""
    from scheduler.ledger.postgres import PostgresStore   # psycopg only when asked for
    schema = fresh_schema(dsn)
    store = PostgresStore(schema, create=True)
    ledger = sqlite3.connect(f"{(source / 'ledger.sqlite').resolve().as_uri()}?mode=ro", uri=True)
    at = 0
    while rows := ledger.execute("SELECT kind, raw FROM receipts WHERE seq >= ? AND seq < ? ORDER BY seq",
                                 (at, at + COPY)).fetchall():
        store.append(at, rows)
        at += len(rows)
    ledger.close()
    store.close()
    return schema


def on_postgres(tmp: Path, source: Path, dsn: str, size: str, schema: str | None = None) -> None:
    """The same ledger in PostgreSQL: a scheduler started alone (it leads:
    Popen to SERVING), then a second one started beside it, which stands by:
    Popen to the end of its first replay (its log's STANDING_BY line), after
    which it follows the leader's receipts as they come. `schema`: a DSN
    whose schema already holds the copy (printed by an earlier run), which
    then is used as it is (with what earlier runs' leaders appended to it)."""
    if schema is None:
        copied = time.perf_counter()
        schema = to_postgres(source, dsn)
        print(f"(copied into PostgreSQL in {time.perf_counter() - copied:.0f} s; "
              f"--postgres-schema '{schema}' reuses it)")

    def shared(workdir: Path) -> Callable[[], None]:
        def edit() -> None:   # configure() wrote a SQLite scheduler.toml: point it at the schema, log at info
            path = workdir / "scheduler.toml"
            text = path.read_text().replace('log_level = "warning"', 'log_level = "info"')
            path.write_text(text.replace("[ledger]\n", f'[ledger]\nstore = "postgresql"\ndsn = "{schema}"\n'))
        return edit

    leader, standby = tmp / "leader", tmp / "standby"
    for workdir in (leader, standby):
        shutil.copytree(source, workdir, ignore=shutil.ignore_patterns("ledger.sqlite*", "scheduler.log", BUILT))
    start = time.perf_counter()
    with scheduler(leader, prepare=shared(leader)) as (_, pid):
        serving, cpu = time.perf_counter() - start, cpu_seconds(pid)
        configure(standby)
        shared(standby)()
        log = standby / "scheduler.log"
        with open(log, "w") as out:
            start = time.perf_counter()
            process = subprocess.Popen([str(BIN / "pool-scheduler"), "--config", str(standby / "scheduler.toml")],
                                       stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                while STANDING_BY not in log.read_text() and process.poll() is None \
                        and time.perf_counter() - start < 120:
                    time.sleep(0.05)
                standing_by, standby_cpu = time.perf_counter() - start, cpu_seconds(process.pid)
            finally:
                process.terminate()
                process.wait()
        if STANDING_BY not in log.read_text():
            raise SystemExit(f"the standby never stood by:\n{log.read_text()}")
    line(f"PostgreSQL: leader start-up, {size}", f"{serving:.2f} s", "<= 10 s", serving / 10)
    line("  its CPU (user + system) until serving", f"{cpu:.2f} s", "", None)
    line(f"PostgreSQL: a standby caught up, {size}", f"{standing_by:.2f} s", "<= 10 s", standing_by / 10)
    line("  its CPU (user + system) until then", f"{standby_cpu:.2f} s", "", None)


BUILT = "built"   # in a --ledger-dir: "receipts claims seconds" once its ledger is complete


def build_startup_ledger(workdir: Path, receipts: int, claims: int) -> float:
    """startup_ledger in `workdir`; the seconds it took (and, last, a BUILT file
    saying what it holds, so a build cut short is not reused)."""
    start = time.perf_counter()
    configure(workdir)
    startup_ledger(workdir, receipts, claims)
    seconds = time.perf_counter() - start
    (workdir / BUILT).write_text(f"{receipts} {claims} {seconds:.0f}\n")
    return seconds

if __name__ == "__main__":
    main()
