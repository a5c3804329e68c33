"""Pool's gate on a real Slurm 22.05 (issue 20), in one run on one cluster
(tests/slurm/cluster.py: munged, slurmctld, two slurmd with 8 fake GPUs each),
with a pool-scheduler whose workers are the two nodes and the pool-slurm
bridge polling every 100 ms:

  job start latency on an idle cluster, p50/p99, interleaved: partition `gpu`
      (governed: held at submission, claim, admission, pin, release, prolog)
      beside partition `open` (the same nodes, not governed: Slurm alone)
      (target: the gate adds <= 300 ms at p50);
  and from a job's last line to its claim's release (target <= 1 s);
  1,000 array tasks held at submission (two arrays of 500, one per tenant,
      each guaranteed 8 of the 16 GPUs): seconds from sbatch until every task
      has a claim in Pool, and until 16 (all the GPUs) run, beside a 1,000-task
      array in `open` reaching 16 running (target: <= 10 s to all claims);
  preemption: a higher-priority job of the same tenant (4 GPUs) makes Pool
      preempt its running 8-GPU job; ms from
      the preemption's receipt (the victim claim's ended_ns) until Slurm shows
      the victim job requeued (no longer RUNNING), p50/p99 (target p99 <= 2 s).

It skips (exit 0, saying why) without Slurm, munge or root. On a shared
2-core machine the figures are loaded; the ratios within one run are what
count.

Usage: .venv/bin/python bench/slurm.py [--jobs N] [--rounds N] [--array N]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "slurm"))
sys.path.insert(0, str(ROOT))
from slurm_e2e import slurm_cluster   # noqa: E402  (tests/slurm/cluster.py)

TREE = """
[[tenants]]
name = "root"
guarantee_uj = 1_000_000_000_000_000
guarantee_mdev = 16000

[[tenants]]
name = "alpha"
parent = "root"
guarantee_uj = 500_000_000_000_000
guarantee_mdev = 8000

[[tenants]]
name = "beta"
parent = "root"
guarantee_uj = 500_000_000_000_000
guarantee_mdev = 8000
"""


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class Bench:
    def __init__(self, workdir: Path) -> None:
        from slurm_e2e import e2e
        harness = _load("pool_slurm_conftest", ROOT / "tests" / "slurm" / "conftest.py")
        self.dir = workdir
        self.scheduler = e2e.Scheduler(workdir, TREE, hosts=("node1", "node2")).start()
        self.e2e = e2e
        self.streams = []
        for node in ("node1", "node2"):
            self.scheduler.register(node, gpus=8)
            self.keep_live(node)
        where = slurm_cluster.scratch()
        config = harness.bridge_config(workdir, self.scheduler, where)
        config.write_text(config.read_text().replace("poll_ms = 200", "poll_ms = 100"))
        hook = where / "pool-slurm-hook"
        hook.write_text(f"#!/bin/sh\nPOOL_SLURM_CONFIG={config} exec {harness.BIN / 'pool-slurm'} "
                        f">>{workdir / 'hooks.log'} 2>&1\n")
        hook.chmod(0o755)
        from pool_slurm.config import load
        from pool_slurm.main import job_submit_lua
        self.cluster = slurm_cluster.Cluster(where).write(prolog=str(hook), epilog=str(hook),
                                                          job_submit=job_submit_lua(["gpu"], load(config).wake))
        self.g = harness.Governed(self.scheduler, self.cluster, workdir, config)
        self.cluster.start()
        self.g.start_bridge()
        self.out = workdir / "out"
        self.out.mkdir()

    def keep_live(self, host: str) -> None:
        """Hold the host's agent stream open, as its agent would: one batch makes the host live, and
        a host with no stream is marked not live after a grace period (service/agents.py)."""
        import queue
        import threading
        from protos.pool.v1 import agent_pb2, types_pb2
        up: queue.Queue = queue.Queue()
        up.put(agent_pb2.AgentMessage(hello=agent_pb2.Hello(host_id=host)))
        responses = self.scheduler.agents.Stream(iter(up.get, None))
        self.streams.append((up, responses))

        def follow() -> None:
            sent = False
            try:
                for answer in responses:
                    if answer.WhichOneof("body") == "occupancy" and not sent:
                        now = time.time_ns()
                        window = agent_pb2.Window(device_id=f"{host}-gpu0", seq=1, start_ns=now - 10**9, end_ns=now,
                                                  uj=10**6, grade=types_pb2.GRADE_HW_SHUNT)
                        up.put(agent_pb2.AgentMessage(batch=agent_pb2.WindowBatch(
                            windows=[self.e2e._split_by(answer.occupancy, window)])))
                        sent = True
            except Exception:   # the stream ends with the bench
                pass
        threading.Thread(target=follow, daemon=True).start()

    def close(self, keep: bool = False) -> None:
        for up, responses in self.streams:
            up.put(None)
            responses.cancel()
        self.g.stop_bridge()
        if keep:
            self.cluster.stop()
            print(f"logs kept: {self.dir} (bridge.log, hooks.log) and {self.cluster.dir / 'log'}")
        else:
            self.cluster.remove()
        self.scheduler.stop()

    def sbatch(self, *args: str, account: str = "acctA") -> str:
        done = subprocess.run(["sbatch", "--parsable", f"--account={account}", f"--output={self.out}/%j.log", *args],
                              capture_output=True, text=True, env=self.cluster.env(), check=True)
        return done.stdout.strip().split(";")[0]

    def squeue(self) -> dict[str, str]:
        done = subprocess.run(["squeue", "-h", "-r", "-o", "%i %T"], capture_output=True, text=True,
                              env=self.cluster.env())
        return dict(line.split() for line in done.stdout.splitlines() if line.strip())

    def idle(self, timeout: float = 120) -> None:
        """No job left in Slurm and no open claim in Pool."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            from protos.pool.v1 import claims_pb2, types_pb2
            open_ = self.scheduler.claims.List(claims_pb2.ListClaimsRequest(
                states=[types_pb2.PENDING, types_pb2.ADMITTED], page_size=1), timeout=10).claims
            if not self.squeue() and not open_:
                return
            time.sleep(0.1)
        raise RuntimeError("the cluster did not empty")

    def diagnose(self) -> str:
        shown = subprocess.run(["scontrol", "show", "job"], capture_output=True, text=True, env=self.cluster.env())
        logs = [(self.dir / name).read_text()[-1500:] for name in ("bridge.log", "hooks.log")
                if (self.dir / name).exists()]
        from protos.pool.v1 import claims_pb2, types_pb2
        page = self.scheduler.claims.List(claims_pb2.ListClaimsRequest(page_size=1000), timeout=30).claims
        summary = {}
        for c in page:
            key = (types_pb2.ClaimState.Name(c.state), types_pb2.Reason.Name(c.reason))
            summary[key] = summary.get(key, 0) + 1
        return "\n".join([str(summary), shown.stdout[-1500:], *logs])

    # -- 1: start latency -------------------------------------------------------------

    def latency(self, jobs: int) -> dict[str, list[float]]:
        from protos.pool.v1 import claims_pb2
        out: dict[str, list[float]] = {"open": [], "gpu": [], "release": []}
        for i in range(jobs):
            for partition in (("open", "gpu") if i % 2 == 0 else ("gpu", "open")):
                mark = self.out / f"start-{partition}-{i}"
                t0 = time.time_ns()
                job = self.sbatch(f"--partition={partition}", "--gres=gpu:1", "--comment=pool:estimate=1kJ",
                                  "--wrap", f"date +%s%N > {mark}.tmp && mv {mark}.tmp {mark}")
                deadline = time.monotonic() + 60
                while not mark.exists():
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"job in {partition} did not start: {self.diagnose()}")
                    time.sleep(0.005)
                out[partition].append((int(mark.read_text()) - t0) / 1e6)
                self.idle()
                if partition == "gpu":   # the job ends right after its mark: its claim's release after that
                    claim = self.scheduler.claims.Get(claims_pb2.GetClaimRequest(
                        claim_id=f"slurm.pooltest.{job}.0"), timeout=10)
                    out["release"].append((claim.ended_ns - int(mark.read_text())) / 1e6)
        return out

    # -- 2: a 1,000-task array --------------------------------------------------------------

    def array(self, tasks: int) -> dict[str, float]:
        from protos.pool.v1 import claims_pb2
        figures = {}
        t0 = time.monotonic()
        half = tasks // 2   # one array per tenant: each guarantees 8 of the 16 GPUs
        jobs = [self.sbatch("--partition=gpu", f"--array=0-{half - 1}", "--gres=gpu:1", "--comment=pool:estimate=1kJ",
                            "--wrap", "sleep 600", account=account) for account in ("acctA", "acctB")]
        prefixes = tuple(f"slurm.pooltest.{job}_" for job in jobs)
        while "claims" not in figures or "running" not in figures:
            if time.monotonic() - t0 > 120:
                states = list(self.squeue().values())
                raise RuntimeError(f"array not through in 120 s: {figures} "
                                   f"{ {x: states.count(x) for x in set(states)} } {self.diagnose()}")
            if "claims" not in figures:
                count, token = 0, ""
                while True:
                    page = self.scheduler.claims.List(claims_pb2.ListClaimsRequest(page_token=token), timeout=30)
                    count += sum(c.claim_id.startswith(prefixes) for c in page.claims)
                    token = page.next_page_token
                    if not token:
                        break
                if count >= 2 * half:
                    figures["claims"] = time.monotonic() - t0
            if "running" not in figures and sum(s == "RUNNING" for s in self.squeue().values()) >= 16:
                figures["running"] = time.monotonic() - t0
            time.sleep(0.05)
        subprocess.run(["scancel", *jobs], env=self.cluster.env(), check=True)
        self.idle()
        t0 = time.monotonic()
        job = self.sbatch("--partition=open", f"--array=0-{tasks - 1}", "--gres=gpu:1", "--wrap", "sleep 600")
        while sum(s == "RUNNING" for s in self.squeue().values()) < 16:
            if time.monotonic() - t0 > 120:
                raise RuntimeError("open array not running in 120 s")
            time.sleep(0.05)
        figures["open_running"] = time.monotonic() - t0
        subprocess.run(["scancel", job], env=self.cluster.env(), check=True)
        self.idle()
        return figures

    # -- 3: preemption -> requeue ------------------------------------------------------------

    def preemption(self, rounds: int) -> list[float]:
        from protos.pool.v1 import types_pb2
        out = []
        for _ in range(rounds):
            low = [self.sbatch("--partition=gpu", "--gres=gpu:8", "--comment=pool:estimate=1kJ", "--wrap", "sleep 600")]
            deadline = time.monotonic() + 120
            while any(self.squeue().get(j) != "RUNNING" for j in low):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"low jobs did not start: {self.diagnose()}")
                time.sleep(0.05)
            high = self.sbatch("--partition=gpu", "--gres=gpu:4", "--comment=pool:estimate=1kJ pool:priority=5",
                               "--wrap", "sleep 600")
            gone: dict[str, int] = {}
            deadline = time.monotonic() + 60
            while not gone:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no victim requeued: {self.diagnose()}")
                states = self.squeue()
                now = time.time_ns()
                gone.update({j: now for j in low if states.get(j) != "RUNNING"})
                time.sleep(0.01)
            [victim] = list(gone)
            claims = self.g.claims(victim)
            preempted = [c for c in claims if c.state == types_pb2.PREEMPTED]
            out.append((gone[victim] - preempted[0].ended_ns) / 1e6)
            subprocess.run(["scancel", *low, high], env=self.cluster.env(), check=True)
            self.idle()
        return out


def latency(bench: Bench, jobs: int) -> None:
    lat = bench.latency(jobs)
    p50 = {k: statistics.median(v) for k, v in lat.items()}
    print(f"start latency, idle cluster, {jobs} jobs each (ms): "
          f"gated p50 {p50['gpu']:.0f} p99 {pct(lat['gpu'], 0.99):.0f}; "
          f"Slurm alone p50 {p50['open']:.0f} p99 {pct(lat['open'], 0.99):.0f}; "
          f"the gate adds {p50['gpu'] - p50['open']:+.0f} ms at p50 (target <= 300); "
          f"claim released after the job's last line: p50 {p50['release']:.0f} p99 {pct(lat['release'], 0.99):.0f}"
          " (target <= 1000)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10, help="start-latency jobs per partition")
    parser.add_argument("--array", type=int, default=1000, help="tasks in the held array")
    parser.add_argument("--rounds", type=int, default=5, help="preemption rounds")
    parser.add_argument("--parts", default="latency,array,preemption",
                        help="which figures to measure (comma-separated; default all three)")
    parser.add_argument("--keep", action="store_true", help="leave the work directory (logs) in place")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    problem = slurm_cluster.missing()
    if problem:
        print(f"bench/slurm.py skipped: {problem}")
        return 0
    bench = Bench(Path(tempfile.mkdtemp(prefix="pool-bench-slurm-")))
    try:
        if "latency" in parts:
            latency(bench, args.jobs)
        if "array" in parts:
            arr = bench.array(args.array)
            print(f"{args.array}-task array: every task a claim in Pool {arr['claims']:.1f} s after sbatch "
                  f"(target <= 10 s); 16 running (all GPUs) {arr['running']:.1f} s; "
                  f"Slurm alone, 16 running {arr['open_running']:.1f} s")
        if "preemption" in parts:
            pre = bench.preemption(args.rounds)
            print(f"preemption -> victim requeued, {args.rounds} rounds (ms): p50 {statistics.median(pre):.0f} "
                  f"p99 {pct(pre, 0.99):.0f} (target p99 <= 2000)")
    finally:
        bench.close(keep=args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
