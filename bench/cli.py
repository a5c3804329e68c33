"""poolctl beside a floor and a peer measured in the same run, over mutual TLS
to a real pool-scheduler subprocess on loopback.

Start-up (issue 23, Must-have 1), process cost, each figure the median (and
least) of --rounds runs, taken in turns so load on a shared machine falls on
all alike:
  `poolctl --help`, `poolctl --version`  beside  `python -c pass` (the
      interpreter alone) and `sbatch --version` when it is on PATH;
  `poolctl claims ID`  beside  a minimal Python client: the interpreter, grpc,
      the generated stubs and the same Get over the same mTLS (FLOOR_CLIENT);
      and `squeue -j ID` when a slurmctld answers here (--slurm starts the
      tests' throwaway cluster, tests/slurm/cluster.py; it needs root), else
      the figure recorded in FLOORS;
  `poolctl submit`  beside  the same minimal client making the same Submit.
The target is poolctl ≤ 1.3 × its floor. Every command runs with its modules'
bytecode cached (in a directory of this run's, $PYTHONPYCACHEPREFIX, written by
an untimed first run of each), as `pip install` leaves an installed poolctl:
where PYTHONDONTWRITEBYTECODE is set (as on the machine these figures were
taken on) each run would otherwise compile poolctl's ~25 modules of ours from
source (~90 ms), which no installed poolctl does.

The client library's cost per unary call (issue 22: ≤ 5 % over bare stubs):
--calls Gets in this process through pool_client.Client and through the bare
generated stub, on channels with the same options and credentials, in
alternating blocks.

List at depth (issue 23, Must-have 2; --list-pending 0 skips it): with
--list-pending claims pending (10,000 by default, written into the ledger
before the scheduler starts: bench/queue_depth.py's queue_ledger), the
scheduler's CPU read in ns from /proc/PID/task/*/schedstat (list_figures
says how each is taken): the first listing at the instant of serving and
after three more start-ups once the scheduler's warm-up logged; then each
figure the least of --list-rounds runs:
  gRPC List for pending and admitted claims, every page, from an in-process
      client: wall time and the scheduler's CPU time while it answered,
      again, and after the queue moved;
  `poolctl claims --state pending,admitted` as a subprocess: wall time, the
      scheduler's CPU time, and the table alone (sort and render, in this
      process, from the same answers);
  beside `squeue -r -t PD,R` listing as many jobs, run once per round in
      turn, when a slurmctld answers here (SLURM_CONF) with its queue
      filled, else the figure recorded in LIST_FLOORS. To fill one: `python
      tests/slurm/cluster.py start DIR`, then with SLURM_CONF=DIR/slurm.conf,
      `sbatch --hold --array=0-999 -p open --wrap true` ten times (Slurm's
      default MaxJobCount stops the tenth array short: ~9,990 jobs).
This script installs nothing.

Usage: .venv/bin/python bench/cli.py [--rounds N] [--calls N] [--slurm] [--list-pending N] [--list-rounds N]
                                     [--list-only]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from e2e import BIN, GPUS, TENANTS, Pki, channel, scheduler             # bench/e2e.py
from queue_depth import queue_ledger                                   # bench/queue_depth.py

# Peers measured earlier on this machine, used when the peer cannot be run here.
FLOORS = {
    "squeue -j ID": (0.010, "issue 23: squeue -j against slurmctld 22.05 on this machine"),
}
LIST_FLOORS = {
    10_000: (0.180, "issue 23: squeue against slurmctld 22.05 on this machine, 10,000 pending"),
}

FLOOR_CLIENT = """
import sys
import grpc
from protos.pool.v1 import claims_pb2, claims_pb2_grpc
address, ca, cert, key, verb, claim = sys.argv[1:7]
read = lambda path: open(path, "rb").read()
credentials = grpc.ssl_channel_credentials(read(ca), read(key), read(cert))
with grpc.secure_channel(address, credentials) as channel:
    stub = claims_pb2_grpc.ClaimsStub(channel)
    if verb == "get":
        status = stub.Get(claims_pb2.GetClaimRequest(claim_id=claim), timeout=30)
    else:
        status = stub.Submit(claims_pb2.SubmitRequest(claim_id=claim, tenant=sys.argv[7], estimate_uj=10**6),
                             timeout=30)
print(status.claim_id, status.state)
"""


def cpu_seconds(pid: int) -> float:
    """The CPU time of every thread of a process so far, from /proc/PID/task/*/schedstat (in ns,
    where /proc/PID/stat counts 10 ms ticks: too coarse beside squeue's tens of ms)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):   # a thread that ended meanwhile
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """The wall seconds and the CPU seconds (user + system) of one run of `command`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=120)
    took = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return took, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def line(label: str, runs: list[float], floor: list[float] | None = None, floor_label: str = "",
         cpu: tuple[list[float], list[float] | None] | None = None) -> str:
    """Wall time, median and least (and the median's ratio to `floor`'s); with `cpu`
    (this command's CPU seconds, and its floor's), the CPU median and its ratio too:
    on a loaded machine CPU time moves less than wall time with what else runs."""
    median = statistics.median(runs)
    text = f"  {label:<44} median {median * 1000:7.1f} ms  least {min(runs) * 1000:7.1f} ms"
    if floor:
        text += f"   {median / statistics.median(floor):.2f} × {floor_label}"
    if cpu is not None:
        mine, theirs = cpu
        text += f"\n  {'':<44} CPU    {statistics.median(mine) * 1000:7.1f} ms"
        if theirs:
            text += f"{'':27}{statistics.median(mine) / statistics.median(theirs):.2f} × the floor's CPU"
    return text


def squeue_peer(rounds: int, slurm: bool, workdir: Path) -> tuple[list[float] | None, str]:
    """`squeue -j ID` against a running slurmctld: one started here with --slurm, else any that answers."""
    if shutil.which("squeue") is None:
        return None, "squeue is not on PATH"
    cluster, env = None, dict(os.environ)
    if slurm:
        sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "slurm"))
        import cluster as slurm_cluster   # tests/slurm/cluster.py
        why = slurm_cluster.missing()
        if why:
            return None, f"no Slurm cluster: {why}"
        cluster = slurm_cluster.Cluster(workdir / "slurm")
        cluster.write()
        cluster.start()
        env.update(cluster.env())
    try:
        submitted = subprocess.run(["sbatch", "--hold", "--parsable", "--wrap", "true"], env=env,
                                   capture_output=True, text=True, timeout=60)
        if submitted.returncode != 0:
            return None, "no slurmctld answers here (--slurm starts one, as root)"
        job = submitted.stdout.strip().split(";")[0]
        return [timed(["squeue", "-j", job], env)[0] for _ in range(rounds)], "squeue -j ID (measured)"
    finally:
        if cluster is not None:
            cluster.stop()


def library_overhead(address: str, ca: str, cert: str, key: str, calls: int, blocks: int = 10
                     ) -> tuple[float, float]:
    """Seconds per Get through the library and through the bare stub (the least block of each)."""
    import grpc

    import pool_client
    from protos.pool.v1 import claims_pb2, claims_pb2_grpc
    library = pool_client.Client(address, ca=ca, cert=cert, key=key)
    bare_channel = grpc.secure_channel(address, library.settings.credentials, options=library.settings.options)
    bare = claims_pb2_grpc.ClaimsStub(bare_channel)
    request = claims_pb2.GetClaimRequest(claim_id="bench-0")
    library.get(request)
    bare.Get(request, timeout=30)
    through, direct = [], []
    per_block = max(1, calls // blocks)
    for _ in range(blocks):
        started = time.perf_counter()
        for _ in range(per_block):
            library.get(request)
        through.append((time.perf_counter() - started) / per_block)
        started = time.perf_counter()
        for _ in range(per_block):
            bare.Get(request, timeout=30)
        direct.append((time.perf_counter() - started) / per_block)
    library.close()
    bare_channel.close()
    return min(through), min(direct)


# -- List at depth ----------------------------------------------------------------

def list_all(stub) -> list:
    """Every page of List for the pending and admitted claims."""
    from protos.pool.v1 import claims_pb2, types_pb2
    request = claims_pb2.ListClaimsRequest(states=[types_pb2.PENDING, types_pb2.ADMITTED])
    answers = []
    while True:
        answer = stub.List(request, timeout=60)
        answers.append(answer)
        if not answer.next_page_token:
            return answers
        request.page_token = answer.next_page_token


class SqueuePeer:
    """`squeue -r -t PD,R` against a slurmctld that answers here, its queue filled beforehand;
    run once per round in turn with Pool's figures, so that load falls on both alike."""

    def __init__(self, pending: int) -> None:
        self.pending, self.walls, self.listed, self.why = pending, [], 0, ""
        if shutil.which("squeue") is None:
            self.why = "squeue is not on PATH"
        elif subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, timeout=30).returncode != 0:
            self.why = "no slurmctld answers here"

    def run(self) -> None:
        if self.why:
            return
        started = time.perf_counter()
        done = subprocess.run(["squeue", "-r", "-t", "PD,R"], capture_output=True, timeout=60)
        self.walls.append(time.perf_counter() - started)
        self.listed = max(self.listed, len(done.stdout.splitlines()) - 1)

    def figures(self) -> tuple[list[float] | None, str]:
        if self.why:
            return None, self.why
        if self.listed < self.pending * 0.9:
            return None, f"its queue holds {self.listed:,} jobs, not ~{self.pending:,} (fill it: see the docstring)"
        return self.walls, (f"squeue -r -t PD,R, {self.listed:,} jobs (peer, measured, {len(self.walls)} runs "
                            f"in turn; median {statistics.median(self.walls) * 1000:.1f} ms)")


def settled(pid: int, quiet_s: float = 0.001, every_s: float = 0.05, timeout: float = 10) -> None:
    """Return once the scheduler spends under `quiet_s` of CPU in `every_s` (what a call
    it answered set going, such as a release's decision and commit, has run its course)."""
    deadline, last = time.monotonic() + timeout, cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(every_s)   # a poll of the scheduler's CPU: the figure is taken after it
        now = cpu_seconds(pid)
        if now - last < quiet_s:
            return
        last = now


WARMED = "listing: "   # the scheduler's log line once the open claims' statuses are encoded (warm_listing)


def warmed(workdir: Path, starts: int, pid: int, timeout: float = 120) -> float:
    """Wait for the `starts`-th start-up's warm-up line in the scheduler's log; the
    seconds after serving it says it took."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [line for line in (workdir / "scheduler.log").read_text().splitlines() if WARMED in line]
        if len(lines) >= starts:
            return float(lines[starts - 1].rsplit(" in ", 1)[1].split()[0])
        time.sleep(0.05)   # a poll of a log, not a figure: every figure below is taken after it
    raise SystemExit(f"pool-scheduler (pid {pid}) logged no {WARMED!r} line within {timeout:.0f} s")


def logging_info(workdir: Path) -> None:
    """The scheduler's log at info (bench/e2e.py's configuration says warning): the warm-up's line."""
    toml = workdir / "scheduler.toml"
    toml.write_text(toml.read_text().replace('log_level = "warning"', 'log_level = "info"', 1))


def list_figures(pending: int, rounds: int, starts: int = 3) -> None:
    """The first listing at the instant the scheduler serves (racing its warm-up,
    which encodes the open claims' statuses between calls); then `starts` more
    start-ups on the same ledger, each listed first once the warm-up logged (on a
    channel already connected: the TLS handshake is not the listing's), the least
    of them; after the last, each figure the least of `rounds` runs (statuses the
    scheduler reuses while their claims stand still), and the least of up to 8
    listings each after the queue moved (a held GPU released: the head admitted;
    measured once the scheduler's CPU has settled after the release)."""
    from scheduler.ctl import claims as ctl_claims
    from protos.pool.v1 import claims_pb2, claims_pb2_grpc
    import grpc
    squeue = SqueuePeer(pending)
    with tempfile.TemporaryDirectory(prefix="pool-bench-list-", dir=os.environ.get("BENCH_DIR")) as tmp:
        workdir = Path(tmp)
        pki = Pki(workdir / "pki", hosts=1)
        with scheduler(workdir, prepare=lambda: (queue_ledger(workdir, pending), logging_info(workdir)),
                       pki=pki) as (address, pid):
            with channel(address, pki, "operator", aio=False) as grpc_channel:
                stub = claims_pb2_grpc.ClaimsStub(grpc_channel)
                cpu, started = cpu_seconds(pid), time.perf_counter()
                list_all(stub)   # at serving: what the warm-up has not encoded yet, the listing does
                racing = time.perf_counter() - started, cpu_seconds(pid) - cpu
            warmed(workdir, 1, pid)
        colds, warm_s = [], []
        for start in range(2, starts + 2):
            squeue.run()
            with scheduler(workdir, prepare=lambda: logging_info(workdir), pki=pki) as (address, pid):   # again
                warm_s.append(warmed(workdir, start, pid))
                grpc_channel = channel(address, pki, "operator", aio=False)
                grpc.channel_ready_future(grpc_channel).result(timeout=30)
                stub = claims_pb2_grpc.ClaimsStub(grpc_channel)
                cpu, started = cpu_seconds(pid), time.perf_counter()
                answers = list_all(stub)   # the first listing once warm
                colds.append((time.perf_counter() - started, cpu_seconds(pid) - cpu))
                if start < starts + 1:
                    grpc_channel.close()
                    continue
                claims = [c for a in answers for c in a.claims]
                assert len(claims) >= pending, len(claims)
                env = {**os.environ, "POOL_SCHEDULER": address, "POOL_CA": str(pki.dir / "ca.pem"),
                       "POOL_CERT": str(pki.dir / "operator.pem"), "POOL_KEY": str(pki.dir / "operator.key"),
                       "POOL_CONFIG": str(workdir / "no-config.toml")}
                env.pop("POOL_CONTEXT", None)
                env.pop("PYTHONDONTWRITEBYTECODE", None)
                env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")   # bytecode cached, as installed
                command = [str(BIN / "poolctl"), "claims", "--state", "pending,admitted"]
                runs: dict[str, list[float]] = {n: [] for n in ("grpc wall", "grpc cpu", "ctl wall", "ctl cpu",
                                                                 "table", "moved wall", "moved cpu")}
                for _ in range(rounds):   # in turns
                    squeue.run()
                    cpu, started = cpu_seconds(pid), time.perf_counter()
                    list_all(stub)
                    runs["grpc wall"].append(time.perf_counter() - started)
                    runs["grpc cpu"].append(cpu_seconds(pid) - cpu)
                    cpu, started = cpu_seconds(pid), time.perf_counter()
                    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
                    runs["ctl wall"].append(time.perf_counter() - started)
                    runs["ctl cpu"].append(cpu_seconds(pid) - cpu)
                    assert done.returncode == 0 and len(done.stdout.splitlines()) >= pending, done.stderr
                    started = time.perf_counter()
                    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
                        ctl_claims.print_claims(ctl_claims.ClaimsTable.default(), claims, "queue")
                    runs["table"].append(time.perf_counter() - started)
                # the queue moves: a held GPU freed admits the head, every waiting claim's place changes
                for hold in range(min(rounds, GPUS)):
                    squeue.run()
                    stub.Release(claims_pb2.ReleaseRequest(claim_id=f"hold-{hold}"), timeout=60)
                    settled(pid)   # the release's own work done: what follows is the listing's
                    cpu, started = cpu_seconds(pid), time.perf_counter()
                    list_all(stub)
                    runs["moved wall"].append(time.perf_counter() - started)
                    runs["moved cpu"].append(cpu_seconds(pid) - cpu)
                grpc_channel.close()
    peer, where = squeue.figures()
    if peer is None:
        value, recorded = LIST_FLOORS.get(pending, (None, ""))
        if value is None:
            raise SystemExit(f"no squeue peer ({where}) and no figure recorded at {pending:,} pending")
        peer, where = [value], f"squeue, recorded: {recorded} ({where})"
    cold = min(colds, key=lambda c: c[1])
    print(f"List at {pending:,} pending, the least of {rounds} runs each (a loaded shared machine)")
    print(f"  {where}: least {min(peer) * 1000:.1f} ms")
    print(f"  {'gRPC List, the first, at serving: scheduler CPU':<44} {racing[1] * 1000:7.1f} ms   "
          f"{racing[1] / min(peer):.2f} × squeue (racing the warm-up; wall {racing[0] * 1000:.1f} ms)")
    print(f"  {'gRPC List, the first after start-up: sched. CPU':<44} least {cold[1] * 1000:7.1f} ms   "
          f"{cold[1] / min(peer):.2f} × squeue (target ≤ 1; of {starts} start-ups: "
          f"{', '.join(f'{c[1] * 1000:.1f}' for c in colds)} ms, each after the warm-up, which took "
          f"{', '.join(f'{w:.2f}' for w in warm_s)} s from serving)")
    for name, label in (("moved cpu", "gRPC List, after the queue moved: sched. CPU"),
                        ("grpc cpu", "gRPC List, every page: the scheduler's CPU"),
                        ("grpc wall", "gRPC List, every page: wall"),
                        ("ctl cpu", "poolctl claims: the scheduler's CPU"),
                        ("table", "poolctl claims: the table (sort, render)"),
                        ("ctl wall", "poolctl claims: wall, the whole process")):
        target = " (target ≤ 1)" if name in ("grpc cpu", "ctl cpu", "moved cpu") else ""
        label = label.replace("the scheduler's CPU", "the scheduler CPU")
        print(f"  {label:<44} least {min(runs[name]) * 1000:7.1f} ms   "
              f"{min(runs[name]) / min(peer):.2f} × squeue{target} (median {statistics.median(runs[name]) * 1000:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9, help="runs of each command (default 9)")
    parser.add_argument("--calls", type=int, default=2000, help="Gets for the library's overhead (default 2000)")
    parser.add_argument("--list-pending", type=int, default=10_000, help="claims pending for the List figures "
                        "(default 10,000; 0: skip them)")
    parser.add_argument("--list-rounds", type=int, default=3, help="runs of each List figure (default 3)")
    parser.add_argument("--list-only", action="store_true", help="only the List figures")
    parser.add_argument("--slurm", action="store_true", help="start tests/slurm/cluster.py for the squeue peer")
    args = parser.parse_args()
    if args.list_only:
        list_figures(args.list_pending, args.list_rounds)
        return

    with tempfile.TemporaryDirectory(prefix="pool-bench-cli-", dir=os.environ.get("BENCH_DIR")) as tmp:
        workdir = Path(tmp)
        pki = Pki(workdir / "pki", hosts=0)
        floor_client = workdir / "floor_client.py"
        floor_client.write_text(FLOOR_CLIENT)
        with scheduler(workdir, pki=pki) as (address, _pid):
            ca, cert, key = (str(pki.dir / name) for name in ("ca.pem", "operator.pem", "operator.key"))
            env = {**os.environ, "POOL_SCHEDULER": address, "POOL_CA": ca, "POOL_CERT": cert, "POOL_KEY": key,
                   "PYTHONPATH": str(Path(__file__).parents[1])}
            env.pop("POOL_CONTEXT", None)
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")   # bytecode cached, as installed (docstring)
            env["POOL_CONFIG"] = str(workdir / "no-config.toml")
            python, poolctl, tenant = sys.executable, str(BIN / "poolctl"), TENANTS[0]
            timed([python, str(floor_client), address, ca, cert, key, "submit", "bench-0", tenant], env)
            counter = itertools.count(1)
            commands = {
                "python -c pass": lambda: [python, "-c", "pass"],
                "poolctl --help": lambda: [poolctl, "--help"],
                "poolctl --version": lambda: [poolctl, "--version"],
                "floor: Get": lambda: [python, str(floor_client), address, ca, cert, key, "get", "bench-0"],
                "poolctl claims ID": lambda: [poolctl, "claims", "bench-0"],
                "floor: Submit": lambda: [python, str(floor_client), address, ca, cert, key, "submit",
                                          f"bench-{next(counter)}", tenant],
                "poolctl submit": lambda: [poolctl, "submit", "--tenant", tenant, "--estimate-uj", "1000000",
                                           f"bench-{next(counter)}"],
            }
            if shutil.which("sbatch") and subprocess.run(["sbatch", "--version"], capture_output=True).returncode == 0:
                commands["sbatch --version"] = lambda: ["sbatch", "--version"]   # it needs a slurm.conf here
            runs: dict[str, list[float]] = {name: [] for name in commands}
            cpu: dict[str, list[float]] = {name: [] for name in commands}
            for command in commands.values():   # untimed: each command's bytecode written once
                timed(command(), env)
            for _ in range(args.rounds):   # in turns: load falls on every command alike
                for name, command in commands.items():
                    wall, used = timed(command(), env)
                    runs[name].append(wall)
                    cpu[name].append(used)
            through, direct = library_overhead(address, ca, cert, key, args.calls)
        squeue, squeue_where = squeue_peer(args.rounds, args.slurm, workdir)

    print(f"poolctl start-up, {args.rounds} runs each (a loaded shared machine: the ratios within this run count)")
    print(line("python -c pass (the interpreter)", runs["python -c pass"]))
    if "sbatch --version" in runs:
        print(line("sbatch --version (peer)", runs["sbatch --version"]))
    for name in ("poolctl --help", "poolctl --version"):
        print(line(name, runs[name], runs["python -c pass"], "the interpreter"))
    print(line("floor: python + grpc + stubs, one Get", runs["floor: Get"], cpu=(cpu["floor: Get"], None)))
    print(line("poolctl claims ID", runs["poolctl claims ID"], runs["floor: Get"], "floor (target ≤ 1.3)",
               (cpu["poolctl claims ID"], cpu["floor: Get"])))
    if squeue:
        print(line(squeue_where, squeue))
    else:
        value, where = FLOORS["squeue -j ID"]
        print(f"  {'squeue -j ID (recorded)':<44} {value * 1000:7.1f} ms   ({where}; {squeue_where})")
    print(line("floor: python + grpc + stubs, one Submit", runs["floor: Submit"], cpu=(cpu["floor: Submit"], None)))
    print(line("poolctl submit", runs["poolctl submit"], runs["floor: Submit"], "floor (target ≤ 1.3)",
               (cpu["poolctl submit"], cpu["floor: Submit"])))
    print(f"pool_client per unary call (Get, {args.calls} calls each, least of 10 blocks, in this process)")
    print(f"  {'bare generated stub':<44} {direct * 1e6:9.0f} µs")
    print(f"  {'pool_client.Client':<44} {through * 1e6:9.0f} µs   {through / direct - 1:+.1%} (target ≤ +5 %)")

    if args.list_pending:
        list_figures(args.list_pending, args.list_rounds)


if __name__ == "__main__":
    main()
