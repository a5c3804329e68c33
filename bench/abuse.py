"""One tenant, one agent or one client cannot take the service from the others
(issue 21): a soak against a real pool-scheduler over mutual TLS.

Three honest tenants submit and release (each a Submit, then its Release, 10
a second) and an honest agent streams windows (2 GPUs, 100 ms windows, a batch
every 100 ms), first alone, then beside one abusive tenant and one compromised
agent running every abuse of the issue at once:

- never-reading Watches on a tenant with 50,000 admitted claims (--backlog), opened until refused;
- Submit + Release, Progress and SubmitMany loops flat out (ledger growth);
- Plan with 1,000 claims, List pages of 1,000, and malformed bytes, in loops;
- an agent streaming 1 µs windows in batches of 10,000 as fast as it may.

Printed: honest Submit p50/p99 alone and beside the abuser (target p99 ≤ 2×),
honest errors (target 0), the scheduler's peak RSS in each phase (target: the
abuse phase ≤ 300 MB above the honest one), the ledger bytes the abuser's two
principals added (target: within their budgets, docs/OPERATIONS.md
"Budgets"), and the windows the honest agent lost (target 0).

The machine is shared: the ratios within one run are what count.

Usage: .venv/bin/python bench/abuse.py [--seconds 60] [--honest-seconds SECONDS]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

from e2e import BIN, GPUS, WINDOW_NS, Pki, _free_port, _wait_serving, channel  # bench/e2e.py
from protos.pool.v1 import agent_pb2, agent_pb2_grpc, claims_pb2, claims_pb2_grpc, types_pb2
from scheduler.ctl import certs
from scheduler.ledger import cose, keys
from scheduler.ledger.receipts import read_core
from scheduler.ledger.sqlite import SqliteStore

HONEST = ("t1", "t2", "t3")
EVIL, EVIL_HOST, HOST = "evil", "evil-host", "honest-host"
STREAM = "/pool.v1.AgentService/Stream"
BACKLOG = 50_000   # the abuser's admitted claims (issue 21's repro), which its Watches would each have held in memory
T0 = time.time_ns() - 3_000 * 10**9   # where every host's windows start (seq 1), in both phases


def config(workdir: Path, address: str, pki: Pki, checkpoint_every: int | None = None) -> str:
    tree = "".join(f'\n[[tenants]]\nname = "{t}"\nparent = "root"\nguarantee_uj = {10**15}\nguarantee_mdev = 1000\n'
                   for t in (*HONEST, EVIL))
    tenants = "".join(f'\n[principals.{t}]\nrole = "tenant"\ntenants = ["{t}"]\n' for t in (*HONEST, EVIL))
    return f"""
[server]
listen = "{address}"
metrics = ""
log_level = "warning"
{pki.config()}
[principals.{HOST}]
role = "agent"
[principals.{EVIL_HOST}]
role = "agent"
{tenants}
[ledger]
path = "{workdir / 'ledger.sqlite'}"
steward_key = "{workdir / 'steward.key'}"
{"" if checkpoint_every is None else f"checkpoint_every = {checkpoint_every}"}

[[tenants]]
name = "root"
guarantee_uj = {10**16}
guarantee_mdev = 4000
{tree}"""


# POOL_PROFILE=FILE: the scheduler's event loop runs under cProfile during the abuse phase only (the
# bench sends SIGUSR1 as it begins and SIGUSR2 as it ends, which writes FILE); a profile of the whole
# run would be mostly the backlog's set-up
PROFILED = """
import cProfile, signal, sys
from scheduler.service import main as m
out = sys.argv.pop(1)
profile = cProfile.Profile()
def stop(*_):
    profile.disable()
    profile.dump_stats(out)
signal.signal(signal.SIGUSR1, lambda *_: profile.enable())
signal.signal(signal.SIGUSR2, stop)
m.main(sys.argv[1:])
"""


def cpu_s(pid: int) -> float:
    """A process's CPU seconds so far (user + system, every thread)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Phase:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.peak_rss = 0.0
        self.cpu = {}   # process -> its share of one core over the phase

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


async def honest_tenant(address: str, pki: Pki, tenant: str, phase: Phase, until: float, tag: str) -> None:
    async with channel(address, pki, tenant) as ch:
        # connected first: a TLS handshake is not a Submit's latency (it made each phase's first
        # Submits 0.13-0.52 s, when every later one took far less)
        await asyncio.wait_for(ch.channel_ready(), 30)
        stub = claims_pb2_grpc.ClaimsStub(ch)
        for i in itertools.count():
            if time.monotonic() > until:
                return
            claim_id = f"{tenant}-{tag}-{i}"
            try:
                start = time.perf_counter()
                await stub.Submit(claims_pb2.SubmitRequest(claim_id=claim_id, tenant=tenant, estimate_uj=1,
                                                           resources=types_pb2.Resources(cpu_millis=10)), timeout=30)
                phase.latencies.append(time.perf_counter() - start)
                await stub.Release(claims_pb2.ReleaseRequest(claim_id=claim_id), timeout=30)
            except grpc.aio.AioRpcError as error:
                phase.errors.append(f"{tenant}: {error.code().name} {error.details()}")
            await asyncio.sleep(0.1)


CLOCK: dict[str, int] = {}   # device -> where its next window starts (a host's windows go on across phases)


def windows(host: str, first_seq: int, count: int, t0: int, span_ns: int, uj: int) -> bytes:
    out = []
    for seq in range(first_seq, first_seq + count):
        device = f"GPU-{host}-{(seq - 1) % GPUS}"
        start = CLOCK.get(device, t0)
        CLOCK[device] = start + span_ns
        out.append(agent_pb2.Window(device_id=device, seq=seq, start_ns=start, end_ns=start + span_ns, uj=uj,
                                    grade=types_pb2.GRADE_HW_SHUNT,
                                    shares=[types_pb2.Share(occupant="unallocated", uj=uj,
                                                            grade=types_pb2.GRADE_HW_SHUNT)]))
    return agent_pb2.AgentMessage(batch=agent_pb2.WindowBatch(windows=out)).SerializeToString()


def registration(host: str) -> agent_pb2.RegisterRequest:
    return agent_pb2.RegisterRequest(
        host_id=host, window_ns=WINDOW_NS,
        devices=[types_pb2.DeviceMeter(device_id=f"GPU-{host}-{g}", kind=types_pb2.GPU, device_type="NVIDIA H200",
                                       meter=types_pb2.NVML_ENERGY, grade=types_pb2.GRADE_HW_SHUNT)
                 for g in range(GPUS)],
        capacity=types_pb2.Capacity(resources=types_pb2.Resources(cpu_millis=10**9, memory_mb=10**9,
                                                                  disk_mb=10**9, gpu_mdev=1000 * GPUS)))


class Agent:
    """A host that streams `per_batch` windows of `span_ns` every `every_s` (0: as fast as it may)."""

    def __init__(self, address: str, pki: Pki, host: str) -> None:
        self.address, self.pki, self.host = address, pki, host
        self.sent = self.acked = self.first = 0
        self.errors: list[str] = []

    async def run(self, until: float, per_batch: int, span_ns: int, uj: int, every_s: float) -> None:
        async with channel(self.address, self.pki, self.host) as ch:
            try:
                registered = await agent_pb2_grpc.AgentServiceStub(ch).Register(registration(self.host), timeout=30)
            except grpc.aio.AioRpcError as error:
                self.errors.append(f"{self.host} register: {error.code().name} {error.details()}")
                return
            self.sent = self.acked = self.first = registered.acked_seq   # a host goes on above its last ack
            t0 = T0
            while time.monotonic() < until:
                call = ch.stream_stream(STREAM, response_deserializer=agent_pb2.SchedulerMessage.FromString)()
                reader = asyncio.create_task(self._read(call))
                try:
                    await call.write(agent_pb2.AgentMessage(hello=agent_pb2.Hello(host_id=self.host))
                                     .SerializeToString())
                    self.sent = max(self.sent, self.acked)   # resend above the last ack, as an agent does
                    while time.monotonic() < until:
                        await call.write(windows(self.host, self.sent + 1, per_batch, t0, span_ns, uj))
                        self.sent += per_batch
                        if every_s:
                            await asyncio.sleep(every_s)
                    deadline = time.monotonic() + 30
                    while self.acked < self.sent and time.monotonic() < deadline and not reader.done():
                        await asyncio.sleep(0.05)
                    await call.done_writing()
                except grpc.aio.AioRpcError as error:
                    self.errors.append(f"{self.host}: {error.code().name} {error.details()}")
                except asyncio.InvalidStateError:   # the scheduler ended the stream: its reader says why
                    pass
                finally:
                    call.cancel()
                    with contextlib.suppress(asyncio.CancelledError, grpc.RpcError):
                        await reader
                if self.acked >= self.sent:
                    return

    async def _read(self, call) -> None:
        try:
            async for message in call:
                if message.WhichOneof("body") == "ack":
                    self.acked = max(self.acked, message.ack.acked_seq)
        except grpc.aio.AioRpcError as error:
            self.errors.append(f"{self.host} stream: {error.code().name} {(error.details() or '')[:120]}")


async def abuser(address: str, pki: Pki, until: float, counts: dict[str, int], only: frozenset[str] = frozenset()
                 ) -> None:
    """The abusive tenant: every abuse of the issue at once (`only`: just those named, to find
    which one costs the honest tenants what)."""
    async with channel(address, pki, EVIL) as ch:
        claims = claims_pb2_grpc.ClaimsStub(ch)

        async def attempt(name: str, call) -> None:
            try:
                await call
                counts[f"{name} ok"] = counts.get(f"{name} ok", 0) + 1
            except grpc.aio.AioRpcError as error:
                key = f"{name} {(error.details() or error.code().name).split(':')[0]}"
                counts[key] = counts.get(key, 0) + 1

        watches: list = []

        async def watch() -> None:   # never-reading Watches, until refused, beside the other abuses
            began = time.monotonic()
            for _ in range(200 if not only or "watch" in only else 0):
                call = claims.Watch(claims_pb2.WatchRequest(tenant=EVIL), timeout=3600)
                watches.append(call)
                try:
                    await asyncio.wait_for(call.read(), 1)
                except grpc.aio.AioRpcError:
                    break   # PRINCIPAL_LIMIT: its streams are all open
                except (asyncio.TimeoutError, StopAsyncIteration):
                    pass
            counts["watches opened"] = sum(1 for w in watches if not w.done())
            counts["s to open them"] = round(time.monotonic() - began, 1)

        async def loop(name: str, make) -> None:
            for i in itertools.count():
                if time.monotonic() > until:
                    return
                await attempt(name, make(i))

        def submit_release(i: int):
            async def both() -> None:
                await claims.Submit(claims_pb2.SubmitRequest(claim_id=f"x-{i}", tenant=EVIL, estimate_uj=1,
                                                             resources=types_pb2.Resources(cpu_millis=1)), timeout=30)
                await claims.Release(claims_pb2.ReleaseRequest(claim_id=f"x-{i}"), timeout=30)
            return both()

        truncated = claims_pb2.SubmitRequest(claim_id="m", tenant=EVIL, estimate_uj=1).SerializeToString()[:-3]
        raw_submit = ch.unary_unary("/pool.v1.Claims/Submit")
        loops = [
            loop("submit+release", submit_release),
            loop("progress", lambda i: claims.Progress(claims_pb2.ProgressRequest(claim_id="e-0", completed_units=i + 1),
                                                       timeout=30)),
            loop("submit-many", lambda i: claims.SubmitMany(claims_pb2.SubmitManyRequest(claims=[
                claims_pb2.SubmitRequest(claim_id=f"m-{i}-{j}", tenant=EVIL, estimate_uj=1) for j in range(100)]),
                timeout=30)),
            loop("plan", lambda i: claims.Plan(claims_pb2.PlanRequest(claims=[
                claims_pb2.SubmitRequest(claim_id=f"p-{j}", tenant=EVIL, estimate_uj=1) for j in range(1000)]),
                timeout=30)),
            loop("list", lambda i: claims.List(claims_pb2.ListClaimsRequest(tenant=EVIL, page_size=1000), timeout=30)),
            loop("malformed", lambda i: raw_submit(truncated, timeout=30)),
        ]
        loops += [loop("submit+release", submit_release), loop("submit+release", submit_release)]
        await asyncio.gather(watch(), *(c for c in loops if not only or c.cr_frame.f_locals["name"] in only))
        for c in loops:
            c.close()   # those left out, never started
        for call in watches:
            call.cancel()


async def abusers(address: str, pki_dir: Path, seconds: float, abuse: str, t0: int, clock: dict[str, int],
                  only: list[str]) -> dict:
    """The abusers' side of a phase, in a process of their own (`--abusers`): the abusive tenant
    and the compromised agent, for `seconds`; what they got, for the report."""
    global T0
    T0 = t0   # the hosts' windows go on where the bench's process left them
    CLOCK.update(clock)
    pki = object.__new__(Pki)
    pki.dir, pki.hosts = pki_dir, []
    counts: dict[str, int] = {}
    until = time.monotonic() + seconds
    evil_agent = Agent(address, pki, EVIL_HOST)
    work = []
    if abuse in ("all", "tenant"):
        work.append(abuser(address, pki, until, counts, frozenset(only)))
    if abuse in ("all", "agent"):   # 1 µs windows as fast as it may
        work.append(evil_agent.run(until, 1_000, 1_000, 1, 0))
    await asyncio.gather(*work)
    return {"counts": counts, "acked": evil_agent.acked - evil_agent.first, "errors": evil_agent.errors,
            "clock": {d: t for d, t in CLOCK.items() if EVIL_HOST in d}}


async def phase(address: str, pki: Pki, pid: int, seconds: float, tag: str, abuse: str, only: list[str] = ()
                ) -> tuple[Phase, Agent, dict]:
    """Honest tenants and the honest agent for `seconds`, measured here; beside them the
    abusers (`abuse`: all, tenant or agent; "" none: the would-be compromised agent streams
    as a host does). The abusers run in a process of their own, as they would on machines of
    their own: in this process their client work (1,000-window batches built in Python, Plans
    of 1,000 read back) would delay the honest clients' own event loop and be counted as the
    scheduler's latency."""
    result = Phase()
    honest_agent = Agent(address, pki, HOST)
    evil_agent = Agent(address, pki, EVIL_HOST)
    child = None
    if abuse:
        child = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--abusers", json.dumps({
                "address": address, "pki": str(pki.dir), "seconds": seconds, "abuse": abuse, "t0": T0,
                "clock": {d: t for d, t in CLOCK.items() if EVIL_HOST in d}, "only": list(only)}),
            stdout=asyncio.subprocess.PIPE)
        assert (await child.stdout.readline()).strip() == b"ready"
        abusers_cpu = cpu_s(child.pid)
    until = time.monotonic() + seconds
    began, cpu_began = time.monotonic(), {"scheduler": cpu_s(pid), "honest clients": time.process_time()}

    async def sample() -> None:
        while time.monotonic() < until:
            result.peak_rss = max(result.peak_rss, rss_mb(pid))
            await asyncio.sleep(0.5)

    work = [sample(), honest_agent.run(until, GPUS, WINDOW_NS, 10_000_000, 0.1),
            *(honest_tenant(address, pki, t, result, until, tag) for t in HONEST)]
    if abuse not in ("all", "agent"):   # the same agent, behaving: its host stays live
        work.append(evil_agent.run(until, GPUS, WINDOW_NS, 10_000_000, 0.1))
    await asyncio.gather(*work)
    wall = time.monotonic() - began
    result.cpu = {"scheduler": (cpu_s(pid) - cpu_began["scheduler"]) / wall,
                  "honest clients": (time.process_time() - cpu_began["honest clients"]) / wall}
    if child is not None:
        result.cpu["abusers' clients"] = (cpu_s(child.pid) - abusers_cpu) / wall
    report = {"counts": {}, "acked": evil_agent.acked - evil_agent.first, "errors": evil_agent.errors}
    if child is not None:
        out, _ = await child.communicate()
        assert child.returncode == 0, f"the abusers' process exited {child.returncode}"
        got = json.loads(out)
        CLOCK.update(got.pop("clock"))
        if abuse == "tenant":
            got.update(acked=report["acked"], errors=report["errors"])
        report = got
    return result, honest_agent, report


async def backlog(address: str, pki: Pki, count: int) -> None:
    """The abuser's tenant holds BACKLOG claims before either phase (submitted by the operator,
    untimed): the state every phase runs on, and what each of its Watches would have held. The
    hosts register and stream first (a host is live from its first counted batch), so that each
    claim is decided as it comes."""
    # the hosts stream all along (a host is live from its first counted batch, and not live once
    # its agent has been gone a while: a claim submitted then would wait, and the next host to
    # come back would admit every one of them in one decision)
    until = time.monotonic() + 3600
    agents = [asyncio.create_task(Agent(address, pki, host).run(until, GPUS, WINDOW_NS, 10_000_000, 0.1))
              for host in (HOST, EVIL_HOST)]
    await asyncio.sleep(2)
    async with channel(address, pki, "operator") as ch:
        claims = claims_pb2_grpc.ClaimsStub(ch)
        for at in range(0, count, 1000):
            await claims.SubmitMany(claims_pb2.SubmitManyRequest(claims=[
                claims_pb2.SubmitRequest(claim_id=f"e-{i}", tenant=EVIL, estimate_uj=1,
                                         resources=types_pb2.Resources(cpu_millis=1)) for i in range(at, at + 1000)]),
                timeout=300)
    for agent in agents:
        agent.cancel()
    await asyncio.gather(*agents, return_exceptions=True)


def ledger_bytes_by(path: Path, actors: set[str], start: int) -> tuple[int, int]:
    """Receipts from `start` on whose actor is one of `actors`: (count, bytes)."""
    store = SqliteStore(path)
    count = size = 0
    try:
        for raw in store.read(start):
            entry, _ = read_core(cose.parse_whole(raw).payload)
            if entry.actor in actors:
                count, size = count + 1, size + len(raw)
    finally:
        store.close()
    return count, size


def main() -> None:
    if sys.argv[1:2] == ["--abusers"]:   # a phase's abusers, in a process of their own (phase)
        given = json.loads(sys.argv[2])
        print("ready", flush=True)
        print(json.dumps(asyncio.run(abusers(given["address"], Path(given["pki"]), given["seconds"], given["abuse"],
                                             given["t0"], given["clock"], given["only"]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="the abuse phase (≥ 60 for the issue's soak)")
    parser.add_argument("--honest-seconds", type=float, help="the honest phase alone (default: as long as the "
                        "abuse phase, so that both p99s are of as many calls and as likely to meet a rare event)")
    parser.add_argument("--log", type=Path, help="keep the scheduler's log here (PYTHONASYNCIODEBUG=1 makes it "
                                                 "name every event-loop step over 100 ms)")
    parser.add_argument("--backlog", type=int, default=BACKLOG, help="the abuser's tenant's admitted claims")
    parser.add_argument("--abuse", choices=("all", "tenant", "agent"), default="all",
                        help="which abusers run beside the honest load (all: the soak)")
    parser.add_argument("--checkpoint-every", type=int, help="the scheduler's ledger.checkpoint_every (default: "
                        "its own, 10,000; 0: no checkpoints, to see what they cost the honest tail)")
    parser.add_argument("--only", type=lambda text: text.split(","), default=[],
                        help="the abusive tenant's abuses to run, by name (watch, submit+release, progress, "
                             "submit-many, plan, list, malformed; comma-separated): which one costs what")
    args = parser.parse_args()
    args.honest_seconds = args.honest_seconds or args.seconds
    with tempfile.TemporaryDirectory(prefix="pool-abuse-") as tmp:
        workdir = Path(tmp)
        pki = Pki(workdir / "pki", 0)
        for name in (*HONEST, EVIL, HOST, EVIL_HOST):
            certs.make_client(pki.dir, name)
        keys.write_pair(keys.generate(), workdir / "steward")
        address = f"127.0.0.1:{_free_port()}"
        (workdir / "scheduler.toml").write_text(config(workdir, address, pki, args.checkpoint_every))
        log = open(workdir / "scheduler.log", "a")
        program = ["-c", PROFILED, os.environ["POOL_PROFILE"]] if os.environ.get("POOL_PROFILE") else [
            str(BIN / "pool-scheduler")]
        process = subprocess.Popen([sys.executable, *program, "--config", str(workdir / "scheduler.toml")],
                                   stdout=log, stderr=log)
        try:
            _wait_serving(address, process, workdir, pki)
            began = time.monotonic()
            asyncio.run(backlog(address, pki, args.backlog))
            print(f"the abuser's {args.backlog} claims submitted in {time.monotonic() - began:.1f} s", flush=True)
            # untimed: the hosts come back live and the backlog's last receipts and checkpoint are written,
            # so that the honest phase measures the honest load on that state, not the backlog's tail
            asyncio.run(phase(address, pki, process.pid, 5, "w", ""))
            alone, agent_alone, _ = asyncio.run(phase(address, pki, process.pid, args.honest_seconds, "a", ""))
            before = SqliteStore(workdir / "ledger.sqlite")
            start = before.length()
            before.close()
            profiled = bool(os.environ.get("POOL_PROFILE"))
            if profiled:
                process.send_signal(signal.SIGUSR1)
            abused, agent_abused, report = asyncio.run(
                phase(address, pki, process.pid, args.seconds, "b", args.abuse, args.only))
            if profiled:
                process.send_signal(signal.SIGUSR2)
        finally:
            process.terminate()
            process.wait(timeout=30)
            log.close()
            if args.log:
                args.log.write_bytes((workdir / "scheduler.log").read_bytes())
        receipts, size = ledger_bytes_by(workdir / "ledger.sqlite", {EVIL, EVIL_HOST}, start)
        lost = (agent_alone.sent - agent_alone.acked) + (agent_abused.sent - agent_abused.acked)
        print(f"honest Submit p50/p99, alone:          {alone.pct(0.5):7.1f} / {alone.pct(0.99):7.1f} ms "
              f"({len(alone.latencies)} calls, {args.honest_seconds:g} s; p90 {alone.pct(0.9):.1f} ms)")
        print(f"honest Submit p50/p99, beside abuser:  {abused.pct(0.5):7.1f} / {abused.pct(0.99):7.1f} ms "
              f"(p90 {abused.pct(0.9):.1f} ms) "
              f"({len(abused.latencies)} calls, {args.seconds:g} s); p99 ratio "
              f"{abused.pct(0.99) / alone.pct(0.99):.2f}x (target <= 2x)")
        errors = alone.errors + abused.errors + agent_alone.errors + agent_abused.errors
        print(f"honest errors: {len(errors)} (target 0){': ' + '; '.join(errors[:5]) if errors else ''}")
        print("CPU, in cores: " + "; ".join(
            f"{name} " + ", ".join(f"{k} {v:.2f}" for k, v in phase_.cpu.items())
            for name, phase_ in (("alone:", alone), ("beside the abuser:", abused)))
              + f" (this machine: {os.cpu_count()} cores)")
        print(f"scheduler peak RSS: honest {alone.peak_rss:.0f} MB, beside abuser {abused.peak_rss:.0f} MB "
              f"(+{abused.peak_rss - alone.peak_rss:.0f} MB, target <= +300)")
        print(f"ledger the abuser added: {receipts} receipts, {size / 1e6:.1f} MB in {args.seconds:g} s "
              f"(budgets: tenant 360,000 and agent 36,000 receipts an hour)")
        print(f"windows the honest agent lost: {lost} (target 0); it sent {agent_abused.sent - agent_abused.first}, "
              f"the compromised agent had {report['acked']} acknowledged")
        print("abuser's calls: " + ", ".join(f"{k} {v}" for k, v in sorted(report["counts"].items())))
        print("the compromised agent's streams ended: " + "; ".join(sorted(set(e[:100] for e in report["errors"]))[:3]))


if __name__ == "__main__":
    main()
