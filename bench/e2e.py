"""End-to-end speed of a real pool-scheduler (issue 6), in one run:

  durable admissions/s through gRPC with concurrent clients (target >= 2,000/s),
  durable unary calls/s (each Submit and each Release) beside the health
      Check's (target >= 70 %, issue 13),
  SubmitMany in batches of 100: durable admissions/s (target >= 10,000/s),
  windows/s ingested from agents in batches (target >= 100,000/s),
  p50/p99 latency of submit -> admitted, alone and under the concurrent load,

each beside its peers measured in the same run: the raw gRPC round trip (the
health Check of the same scheduler, alone and with the same concurrency) and
the raw ledger append rate (Steward + GroupCommitWriter in this process on a
fresh SQLite file, same concurrency).

The scheduler runs twice: over mutual TLS (the production setting: every
caller a principal with its certificate, every call through the
authorization table), and in plaintext (`[server] insecure = true`); the
admission and window figures of the first are printed as a ratio of the
second (target >= 80 %, issue 11). Both are measured `--rounds` times, in
alternating order, and each figure is the best of its rounds: on a shared
host one slow spell would otherwise decide the ratio.

The scheduler is a `pool-scheduler` subprocess on loopback; the agents are
fake hosts (8 GPUs each) that Register and Stream through the real
AgentService. Each admission is a claim of an eighth of a GPU; once admitted,
its client releases it (not timed), so open claims stay at most the clients in
flight, as in a cluster at steady state: one admit + release cycle is two
decisions and three receipts. Phases run for a fixed time. This process is the
load generator, so on a small machine it competes with the scheduler for cores.

With --postgres DSN (or $POOL_BENCH_POSTGRES_DSN) the schedulers' ledgers and the
raw ledger peer are on the PostgreSQL store, each in a fresh schema (issue 15).

Usage: .venv/bin/python bench/e2e.py [--quick] [--postgres DSN]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ledger import fresh_schema, group_commit_rate, line   # bench/ledger.py: the raw append peer, the figure format
from protos.pool.v1 import agent_pb2, agent_pb2_grpc, claims_pb2, claims_pb2_grpc, types_pb2
from scheduler.ctl import certs
from scheduler.ledger import keys
from scheduler.ledger.sqlite import SqliteStore
from scheduler.ledger.steward import Steward
from scheduler.ledger.writer import GroupCommitWriter
from scheduler.service.windows.batch import WINDOWS, batch_columns, windows_body

BIN = Path(sys.executable).parent
SERVE_WITHIN_S = 120   # a start from a large ledger on a loaded box (bench/queue_depth.py) takes tens of seconds
TENANTS = [f"team{i}" for i in range(4)]
GPUS = 8
SLICE = 125                       # mdev: an eighth of a GPU per claim
HUGE = 10**17                     # µJ: no claim is ever refused for entitlement
WINDOW_NS = 100_000_000           # 100 ms windows at 100 W
WINDOW_UJ = 10_000_000
ADMITTED = types_pb2.ClaimState.Value("ADMITTED")
STREAM = "/pool.v1.AgentService/Stream"
MANY, MANY_INFLIGHT = 100, 8      # SubmitMany: claims per call, calls in flight


class Sizes:
    """Phases are bounded by time (and windows by what was serialized ahead)."""

    def __init__(self, quick: bool) -> None:
        self.seconds = 2.5 if quick else 12.0        # per phase
        self.inflight = 64
        self.hosts, self.batch = 4, 1_000
        self.batches = 15 if quick else 50            # per host, serialized before the clock starts
        self.peer_batches = 10 if quick else 40       # per host, for the ledger-only peer
        self.ledger_appends = 4_000 if quick else 20_000


# -- the scheduler subprocess -------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Pki:
    """The bench's principals: an operator (the claim clients) and one agent per fake host."""

    def __init__(self, directory: Path, hosts: int) -> None:
        self.dir, self.hosts = directory, [f"bench-{h}" for h in range(hosts)]
        certs.make_ca(directory)
        certs.make_server(directory, ("127.0.0.1",))
        for name in ["operator", *self.hosts]:
            certs.make_client(directory, name)

    def config(self) -> str:
        agents = "".join(f'[principals.{h}]\nrole = "agent"\n' for h in self.hosts)
        return f"""
[server.tls]
cert = "{self.dir / 'server.pem'}"
key = "{self.dir / 'server.key'}"
client_ca = "{self.dir / 'ca.pem'}"

[principals.operator]
role = "operator"
{agents}"""

    def credentials(self, principal: str) -> grpc.ChannelCredentials:
        read = lambda name: (self.dir / name).read_bytes()  # noqa: E731
        return grpc.ssl_channel_credentials(read("ca.pem"), read(f"{principal}.key"), read(f"{principal}.pem"))


def channel(address: str, pki: Pki | None, principal: str, aio: bool = True) -> grpc.Channel:
    module = grpc.aio if aio else grpc
    if pki is None:
        return module.insecure_channel(address)
    return module.secure_channel(address, pki.credentials(principal))


def _config(workdir: Path, address: str, pki: Pki | None, dsn: str = "") -> str:
    tenants = "".join(f'\n[[tenants]]\nname = "{t}"\nparent = "root"\nguarantee_uj = {HUGE}\n'
                      f'guarantee_mdev = {10**9}\n' for t in TENANTS)
    return f"""
[server]
listen = "{address}"
metrics = ""
log_level = "warning"
{"insecure = true" if pki is None else pki.config()}

[ledger]
path = "{workdir / 'ledger.sqlite'}"
steward_key = "{workdir / 'steward.key'}"
{f'store = "postgresql"{chr(10)}dsn = "{fresh_schema(dsn)}"' if dsn else ""}

[limits]   # throughput is what is measured here: no per-principal rate or open-claim cap
submits_per_s = 0
windows_per_s = 0
max_open_claims_per_tenant = 0

[[tenants]]
name = "root"
guarantee_uj = {HUGE * len(TENANTS)}
guarantee_mdev = {10**9 * len(TENANTS)}
{tenants}"""


def configure(workdir: Path, pki: Pki | None = None, dsn: str = "") -> str:
    """scheduler.toml on a free loopback port (mTLS with `pki`, else insecure mode), and a
    steward key if there is none yet; the address."""
    address = f"127.0.0.1:{_free_port()}"
    workdir.mkdir(parents=True, exist_ok=True)
    if not (workdir / "steward.key").exists():
        keys.write_pair(keys.generate(), workdir / "steward")
    (workdir / "scheduler.toml").write_text(_config(workdir, address, pki, dsn))
    return address


@contextlib.contextmanager
def scheduler(workdir: Path, prepare: Callable[[], None] | None = None, pki: Pki | None = None, dsn: str = "",
              env: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    """A pool-scheduler serving on loopback (after `prepare`, which may write
    its ledger; `env`: its environment, if not this one's); terminated, then
    killed, on the way out."""
    address = configure(workdir, pki, dsn)
    if prepare is not None:
        prepare()
    log = open(workdir / "scheduler.log", "a")
    process = subprocess.Popen([str(BIN / "pool-scheduler"), "--config", str(workdir / "scheduler.toml")],
                               stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    try:
        _wait_serving(address, process, workdir, pki)
        yield address, process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _wait_serving(address: str, process: subprocess.Popen, workdir: Path, pki: Pki | None) -> None:
    deadline = time.monotonic() + SERVE_WITHIN_S
    with channel(address, pki, "operator", aio=False) as health_channel:
        health = health_pb2_grpc.HealthStub(health_channel)
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise SystemExit(f"pool-scheduler exited:\n{(workdir / 'scheduler.log').read_text()}")
            with contextlib.suppress(grpc.RpcError):
                if health.Check(health_pb2.HealthCheckRequest(), timeout=1).status == \
                        health_pb2.HealthCheckResponse.SERVING:
                    return
            time.sleep(0.1)
    raise SystemExit(f"pool-scheduler did not serve within {SERVE_WITHIN_S} s")


# -- closed-loop load ---------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Run:
    """One phase: elapsed seconds, per-call latencies, how many answers passed,
    and the cores the scheduler and this process kept busy meanwhile."""

    def __init__(self, elapsed: float, latencies: list[float], ok: int, cpu: tuple[float, float]) -> None:
        self.elapsed, self.latencies, self.ok = elapsed, sorted(latencies), ok
        self.server_cores, self.client_cores = (c / elapsed for c in cpu)

    @property
    def rate(self) -> float:
        return self.ok / self.elapsed

    def pct(self, q: float) -> float:
        return self.latencies[min(len(self.latencies) - 1, int(q * len(self.latencies)))]


async def timed(server_pid: int, work: Awaitable[tuple[list[float], int]]) -> Run:
    cpu = cpu_seconds(server_pid), time.process_time()
    start = time.perf_counter()
    latencies, ok = await work
    elapsed = time.perf_counter() - start
    return Run(elapsed, latencies, ok, (cpu_seconds(server_pid) - cpu[0], time.process_time() - cpu[1]))


async def closed_loop(call: Callable[[int], Awaitable], ok: Callable, seconds: float, inflight: int,
                      after: Callable[[int], Awaitable] | None = None) -> tuple[list[float], int]:
    """Calls for `seconds`, `inflight` at a time; `after` runs once a call is answered, outside its latency."""
    latencies: list[float] = []
    passed = 0
    turns = itertools.count()
    deadline = time.perf_counter() + seconds

    async def client() -> None:
        nonlocal passed
        for i in turns:
            start = time.perf_counter()
            if start > deadline:
                return
            answer = await call(i)
            latencies.append(time.perf_counter() - start)
            passed += ok(answer)
            if after is not None:
                await after(i)

    await asyncio.gather(*(client() for _ in range(inflight)))
    return latencies, passed


# -- fake agents --------------------------------------------------------------

def _meters(host: str) -> list[types_pb2.DeviceMeter]:
    return [types_pb2.DeviceMeter(device_id=f"GPU-{host}-{g}", kind=types_pb2.GPU, device_type="NVIDIA H200",
                                  meter=types_pb2.NVML_ENERGY, grade=types_pb2.GRADE_HW_SHUNT)
            for g in range(GPUS)]


def _batch(host: str, first_seq: int, size: int, t0: int) -> bytes:
    """One WindowBatch, serialized ahead so that the client's CPU is not what is measured."""
    windows = []
    for seq in range(first_seq, first_seq + size):
        start = t0 + (seq // GPUS) * WINDOW_NS
        windows.append(agent_pb2.Window(
            device_id=f"GPU-{host}-{seq % GPUS}", seq=seq, start_ns=start, end_ns=start + WINDOW_NS,
            uj=WINDOW_UJ, grade=types_pb2.GRADE_HW_SHUNT, mean_uw=WINDOW_UJ * 10,
            shares=[types_pb2.Share(occupant="unallocated", uj=WINDOW_UJ, grade=types_pb2.GRADE_HW_SHUNT)]))
    return agent_pb2.AgentMessage(batch=agent_pb2.WindowBatch(windows=windows)).SerializeToString()


def registration(host: str) -> agent_pb2.RegisterRequest:
    return agent_pb2.RegisterRequest(host_id=host, devices=_meters(host), window_ns=WINDOW_NS, capacity=types_pb2.Capacity(
        resources=types_pb2.Resources(cpu_millis=10**9, memory_mb=10**9, disk_mb=10**9)))


class FakeAgent:
    """A registered host with its stream open; occupancy pushes are read and dropped."""

    def __init__(self, channel: grpc.aio.Channel, host: str) -> None:
        self.channel, self.host = channel, host
        self.acked = 0
        self.ended = False
        self._progress = asyncio.Condition()

    async def connect(self) -> None:
        await agent_pb2_grpc.AgentServiceStub(self.channel).Register(registration(self.host))
        self.call = self.channel.stream_stream(STREAM, response_deserializer=agent_pb2.SchedulerMessage.FromString)()
        await self.call.write(agent_pb2.AgentMessage(hello=agent_pb2.Hello(host_id=self.host)).SerializeToString())
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for message in self.call:
                if message.WhichOneof("body") == "ack":
                    async with self._progress:
                        self.acked = message.ack.acked_seq
                        self._progress.notify_all()
        finally:   # wake a sender waiting on an ack that will never come
            async with self._progress:
                self.ended = True
                self._progress.notify_all()

    async def send(self, batches: list[bytes], batch_size: int, deadline: float) -> int:
        """Write batches until the deadline (gRPC flow control paces us), wait for
        the ack of the last one written, and return the windows it covers."""
        first = self.acked
        last_seq = first
        for batch in batches:
            if time.perf_counter() > deadline:
                break
            await self.call.write(batch)
            last_seq += batch_size
        async with self._progress:
            await self._progress.wait_for(lambda: self.acked >= last_seq or self.ended)
        if self.acked < last_seq:
            raise SystemExit(f"{self.host}: stream ended at ack {self.acked}: {await self.call.code()}")
        return last_seq - first

    async def close(self) -> None:
        self.call.cancel()
        with contextlib.suppress(asyncio.CancelledError, grpc.RpcError):
            await self._reader


# -- the measurements ---------------------------------------------------------

async def measure_service(address: str, pid: int, sizes: Sizes, pki: Pki | None) -> dict[str, Run]:
    """Claims and health as the operator; each fake host on a channel of its own, as its agent."""
    hosts = [f"bench-{h}" for h in range(sizes.hosts)]
    channels = [channel(address, pki, host) for host in hosts]
    async with channel(address, pki, "operator") as clients:
        agents = [FakeAgent(c, host) for c, host in zip(channels, hosts)]
        for agent in agents:
            await agent.connect()
        try:
            runs = await _rpc_runs(clients, pid, sizes)
            plans = _plans(agents, sizes)   # serialized before the clock starts
            runs["windows"] = await timed(pid, _send_windows(agents, plans, sizes))
        finally:
            for agent in agents:
                await agent.close()
            for c in channels:
                await c.close()
    return runs


async def _rpc_runs(channel: grpc.aio.Channel, pid: int, sizes: Sizes) -> dict[str, Run]:
    health = health_pb2_grpc.HealthStub(channel)
    claims = claims_pb2_grpc.ClaimsStub(channel)
    check = health_pb2.HealthCheckRequest()

    def serving(answer: health_pb2.HealthCheckResponse) -> bool:
        return answer.status == health_pb2.HealthCheckResponse.SERVING

    def admitted(status: claims_pb2.ClaimStatus) -> bool:
        return status.state == ADMITTED

    def submit(prefix: str) -> Callable[[int], Awaitable]:
        return lambda i: claims.Submit(claims_pb2.SubmitRequest(
            claim_id=f"{prefix}-{i}", tenant=TENANTS[i % len(TENANTS)],
            resources=types_pb2.Resources(gpu_mdev=SLICE), estimate_uj=1))

    def release(prefix: str) -> Callable[[int], Awaitable]:
        """Steady state: every admitted claim is released, so open claims stay at most the clients."""
        return lambda i: claims.Release(claims_pb2.ReleaseRequest(claim_id=f"{prefix}-{i}"))

    def submit_many(i: int) -> Awaitable:
        """A batch of CPU-only claims (the hosts' CPU is unbounded): all admitted, kept open."""
        return claims.SubmitMany(claims_pb2.SubmitManyRequest(claims=[claims_pb2.SubmitRequest(
            claim_id=f"many-{i}-{j}", tenant=TENANTS[j % len(TENANTS)], resources=types_pb2.Resources(cpu_millis=1),
            estimate_uj=1) for j in range(MANY)]))

    def all_admitted(answer: claims_pb2.SubmitManyResponse) -> int:
        return sum(r.WhichOneof("result") == "status" and r.status.state == ADMITTED for r in answer.results)

    n = sizes.inflight
    return {
        "rtt sequential": await timed(pid, closed_loop(lambda i: health.Check(check), serving,
                                                       sizes.seconds, 1)),
        "rtt concurrent": await timed(pid, closed_loop(lambda i: health.Check(check), serving,
                                                       sizes.seconds, n)),
        "submit sequential": await timed(pid, closed_loop(submit("seq"), admitted, sizes.seconds, 1,
                                                          release("seq"))),
        "submit concurrent": await timed(pid, closed_loop(submit("conc"), admitted, sizes.seconds, n,
                                                          release("conc"))),
        # last: its claims stay open
        "submit many": await timed(pid, closed_loop(submit_many, all_admitted, sizes.seconds, MANY_INFLIGHT)),
    }


def _plans(agents: list[FakeAgent], sizes: Sizes) -> list[list[bytes]]:
    t0 = time.time_ns() - 86_400 * 10**9   # a day ago: the scheduler refuses windows from the future
    return [[_batch(a.host, a.acked + 1 + b * sizes.batch, sizes.batch, t0) for b in range(sizes.batches)]
            for a in agents]


async def _send_windows(agents: list[FakeAgent], plans: list[list[bytes]], sizes: Sizes) -> tuple[list[float], int]:
    deadline = time.perf_counter() + sizes.seconds
    sent = await asyncio.gather(*(a.send(p, sizes.batch, deadline) for a, p in zip(agents, plans)))
    return [], sum(sent)


def windows_append_rate(path: Path, sizes: Sizes) -> float:
    """The ledger alone taking the same window batches, one receipt each, one appender per host."""
    batch = agent_pb2.AgentMessage.FromString(_batch("peer", 1, sizes.batch, time.time_ns())).batch
    body = windows_body("peer", batch_columns(batch)[0])
    steward = Steward.open(SqliteStore(path, create=True), keys.generate())

    async def host(writer: GroupCommitWriter) -> None:
        for _ in range(sizes.peer_batches):
            await writer.append(WINDOWS, body)

    async def main() -> float:
        writer = GroupCommitWriter(steward)
        start = time.perf_counter()
        await asyncio.gather(*(host(writer) for _ in range(sizes.hosts)))
        await writer.close()
        return time.perf_counter() - start

    try:
        return sizes.batch * sizes.peer_batches * sizes.hosts / asyncio.run(main())
    finally:
        steward.close()


# -- report -------------------------------------------------------------------

def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def report(runs: dict[str, Run], plain: dict[str, Run], appends: dict[int, float], window_appends: float,
           sizes: Sizes) -> None:
    """`runs` over mTLS; `plain` the same phases in insecure mode."""
    n = sizes.inflight
    windows = runs["windows"]
    refused = sum(len(runs[k].latencies) - runs[k].ok for k in ("submit sequential", "submit concurrent")) + \
        len(runs["submit many"].latencies) * MANY - runs["submit many"].ok
    if refused:
        print(f"!! {refused:,} submits were not admitted (only admitted ones are counted)")
    for clients, label in ((n, "concurrent"), (1, "sequential")):
        run, rtt = runs[f"submit {label}"], runs[f"rtt {label}"]
        target = (">= 2,000/s", run.rate / 2000) if clients > 1 else ("", None)
        line(f"durable admissions/s, {clients} in flight (+release)", f"{run.rate:,.0f}/s", *target)
        line(f"  vs raw gRPC health Check, {clients} in flight", f"{rtt.rate:,.0f}/s", "peer", run.rate / rtt.rate)
        line(f"  vs raw ledger appends, {clients} in flight", f"{appends[clients]:,.0f}/s",
             "peer (3 receipts per admit+release)", run.rate / appends[clients])
    run, rtt = runs["submit concurrent"], runs["rtt concurrent"]
    line(f"durable unary calls/s, {n} in flight (Submit + Release)", f"{2 * run.rate:,.0f}/s",
         f">= 70% of health Check {rtt.rate:,.0f}/s", 2 * run.rate / rtt.rate)
    many = runs["submit many"]
    line(f"SubmitMany x {MANY}, {MANY_INFLIGHT} in flight: durable admissions/s", f"{many.rate:,.0f}/s",
         ">= 10,000/s", many.rate / 10_000)
    line(f"windows/s ingested, {sizes.hosts} streams x {sizes.batch:,}/batch", f"{windows.rate:,.0f}/s",
         ">= 100,000/s", windows.rate / 100_000)
    line("  vs raw ledger appends of the same batches", f"{window_appends:,.0f}/s", "peer (>= 75%)",
         windows.rate / window_appends)
    for clients, label in ((1, "sequential"), (n, "concurrent")):
        run, rtt = runs[f"submit {label}"], runs[f"rtt {label}"]
        for q in (0.5, 0.99):
            line(f"submit -> admitted p{q * 100:.0f}, {clients} in flight", ms(run.pct(q)),
                 f"peer: health Check {ms(rtt.pct(q))}", run.pct(q) / rtt.pct(q))
    print("mTLS beside plaintext (insecure mode), same run, best of each's rounds:")
    for name, label in (("submit concurrent", f"durable admissions/s, {n} in flight"),
                        ("submit sequential", "durable admissions/s, 1 in flight"),
                        ("windows", "windows/s ingested")):
        line(f"  {label}: mTLS vs plaintext", f"{runs[name].rate:,.0f}/s vs {plain[name].rate:,.0f}/s",
             "target >= 80 % of plaintext", runs[name].rate / plain[name].rate)
    print("cores busy per phase, mTLS (scheduler / this process): " + ",  ".join(
        f"{name} {run.server_cores:.2f} / {run.client_cores:.2f}" for name, run in runs.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller counts: a smoke run")
    parser.add_argument("--postgres", metavar="DSN", default=os.environ.get("POOL_BENCH_POSTGRES_DSN"),
                        help="the ledger on PostgreSQL (a database the bench may create schemas in)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="mTLS and plaintext schedulers measured this many times each, in alternating "
                             "order; each figure is the best round (default %(default)s)")
    args = parser.parse_args()
    sizes = Sizes(args.quick)
    print(f"cores: {os.cpu_count()}   load average: {os.getloadavg()[0]:.2f}   "
          f"command: {shlex.join([sys.executable, *sys.argv])}")
    print("ratios: rates measured / peer or target; latencies measured / peer")
    with tempfile.TemporaryDirectory(prefix="pool-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        workdir = Path(tmp)
        pki = Pki(workdir / "pki", sizes.hosts)
        best: dict[str, dict[str, Run]] = {"mtls": {}, "plain": {}}
        for r in range(args.rounds):   # alternating which goes first, so the host's slow spells hit both
            for mode in ("mtls", "plain") if r % 2 == 0 else ("plain", "mtls"):
                security = pki if mode == "mtls" else None
                with scheduler(workdir / f"{mode}-{r}", pki=security, dsn=args.postgres or "") as (address, pid):
                    runs = asyncio.run(measure_service(address, pid, sizes, security))
                for phase, run in runs.items():
                    if phase not in best[mode] or run.rate > best[mode][phase].rate:
                        best[mode][phase] = run
        runs, plain = best["mtls"], best["plain"]
        appends = {clients: group_commit_rate(args.postgres or workdir / f"appends-{clients}.db", keys.generate(),
                                              total, clients)
                   for clients, total in ((1, sizes.ledger_appends // 20), (sizes.inflight, sizes.ledger_appends))}
        window_appends = windows_append_rate(workdir / "windows.db", sizes)
    report(runs, plain, appends, window_appends, sizes)


if __name__ == "__main__":
    main()
