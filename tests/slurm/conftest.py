"""A real Slurm cluster (tests/slurm/cluster.py) for the bridge's tests, and the
e2e harness (a pool-scheduler, agents replaying the bundled trace) beside it.

Without Slurm, munge or root the tests here are skipped, saying how to run them
(.ci/run installs Slurm)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from slurm_e2e import e2e, slurm_cluster   # noqa: E402  (the e2e harness and cluster.py, loaded by path)

cluster = e2e.cluster
harness = e2e.harness


def _skip_without_slurm() -> None:
    problem = slurm_cluster.missing()
    if problem:
        pytest.skip(f"Slurm tests skipped: {problem}")


@pytest.fixture
def slurm():
    """slurm(prolog=, epilog=, job_submit=) starts a cluster of its own for this test."""
    _skip_without_slurm()
    started: list[slurm_cluster.Cluster] = []

    def start(**hooks) -> slurm_cluster.Cluster:
        c = slurm_cluster.Cluster(slurm_cluster.scratch()).write(**hooks).start()
        started.append(c)
        return c

    yield start
    for c in started:
        c.remove()


# -- Pool governing the cluster ------------------------------------------------
# A pool-scheduler with workers node1 and node2 (8 GPUs each, registered as
# their agents would), the test cluster with pool-slurm's hooks and job_submit.lua,
# and the bridge daemon; `Governed` submits jobs and reads both sides.

import functools
import json as _json
import os
import subprocess
import time
from dataclasses import dataclass, field

from protos.pool.v1 import agent_pb2, claims_pb2, ops_pb2, types_pb2

BIN = Path(sys.executable).parent
GB = 8   # GPUs per node, as the test cluster's slurm.conf

TREE = """
[[tenants]]
name = "root"
guarantee_uj = 1_000_000_000_000
guarantee_mdev = 16000

[[tenants]]
name = "alpha"
parent = "root"
guarantee_uj = 500_000_000_000
guarantee_mdev = 8000

[[tenants]]
name = "beta"
parent = "root"
guarantee_uj = 500_000_000_000
guarantee_mdev = 8000

[[work_classes]]
name = "train"
required = 2

[idle]
window_ns = 1_000_000_000

[[idle.thresholds]]
device_kind = "NVIDIA H200"
uw = 50_000_000
"""


@dataclass
class Governed:
    scheduler: object
    cluster: slurm_cluster.Cluster
    dir: Path
    config: Path
    bridge: subprocess.Popen | None = None
    seq: dict = field(default_factory=dict)
    occupancy: dict = field(default_factory=dict)   # worker -> the occupancy its last stream was sent

    # -- Slurm ------------------------------------------------------------------
    def run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(list(command), capture_output=True, text=True, env=self.cluster.env(), timeout=30)
        if check:
            assert done.returncode == 0, f"{command}: {done.stderr}"
        return done

    def sbatch(self, account: str = "acctA", gpus: int = 1, comment: str = "pool:estimate=1kJ", nodes: int = 1,
               script: str = "sleep 300", *extra: str) -> str:
        out = self.dir / "out"
        out.mkdir(exist_ok=True)
        args = ["sbatch", "--parsable", f"--account={account}", f"--gres=gpu:{gpus}", f"-N{nodes}",
                f"--output={out}/%j.out", *extra]
        if comment:
            args.append(f"--comment={comment}")
        return self.run(*args, "--wrap", script).stdout.strip().split(";")[0]

    def job(self, key: str) -> dict:
        """One line of `scontrol show job` parsed into a dict (AdminComment whole)."""
        shown = self.run("scontrol", "show", "-o", "job", key, check=False).stdout
        fields = {}
        if "AdminComment=" in shown:
            head, admin = shown.split("AdminComment=", 1)
            admin, _, rest = admin.partition(" Comment=") if " Comment=" in admin else (admin, "", "")
            fields["AdminComment"] = admin.strip()
            shown = head + " Comment=" + rest if rest else head
        for token in shown.split():
            name, _, value = token.partition("=")
            fields.setdefault(name, value)
        return fields

    def squeue(self, key: str, **env: str) -> str:
        """What a user's plain `squeue -j KEY` prints for the job (no header), with `env` set (SQUEUE_FORMAT)."""
        done = subprocess.run(["squeue", "-h", "-j", key], capture_output=True, text=True, timeout=30,
                              env={**self.cluster.env(), **env})
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def state(self, key: str) -> str:
        return self.job(key).get("JobState", "")

    def wait_state(self, key: str, *states: str, timeout: float = 60) -> None:
        e2e.wait_for(f"job {key} to be {'/'.join(states)} (is {self.state(key)})",
                     lambda: self.state(key) in states, timeout)

    # -- Pool -------------------------------------------------------------------
    def claims(self, key: str) -> list:
        """Every claim of job `key`, settled ones included, in id order."""
        prefix = f"slurm.pooltest.{key}."
        out, token = [], ""
        while True:
            page = self.scheduler.claims.List(claims_pb2.ListClaimsRequest(page_token=token), timeout=10)
            out += [c for c in page.claims if c.claim_id.startswith(prefix)]
            token = page.next_page_token
            if not token:
                return sorted(out, key=lambda c: c.claim_id)

    def open_claims(self, key: str) -> list:
        return [c for c in self.claims(key) if c.state in (types_pb2.PENDING, types_pb2.ADMITTED)]

    def meter(self, claim: object, uj_per_device: int, seconds: int = 1) -> None:
        """One window per device of `claim`, charging it `uj_per_device` each, as node's agent would stream."""
        now = time.time_ns()
        self.stream(claim.worker, [(device, now - seconds * 1_000_000_000, now, uj_per_device, False)
                                   for device in sorted(claim.devices_mdev)])

    def stream(self, worker: str, spans: list) -> None:
        """Windows (device, start_ns, end_ns, µJ, late) in one batch, as worker's agent streams them: each
        split by the occupancy the scheduler sends at the stream's start (RULES §2), or, `late`, by the
        one the worker's previous stream was sent (an agent's window that closed before it heard of a
        release). Remembers the occupancy it was sent for the next `late` window."""
        import queue
        up: queue.Queue = queue.Queue()
        up.put(agent_pb2.AgentMessage(hello=agent_pb2.Hello(host_id=worker)))
        responses = self.scheduler.agents.Stream(iter(up.get, None), timeout=10)
        self.seq[worker] = self.seq.get(worker, 0) + 1
        windows = [agent_pb2.Window(device_id=device, seq=self.seq[worker] * 100 + i, start_ns=start, end_ns=end,
                                    uj=uj, grade=types_pb2.GRADE_HW_SHUNT)
                   for i, (device, start, end, uj, _) in enumerate(spans)]
        try:
            for answer in responses:
                if answer.WhichOneof("body") == "occupancy":
                    old = self.occupancy.get(worker, answer.occupancy)
                    self.occupancy[worker] = answer.occupancy
                    up.put(agent_pb2.AgentMessage(batch=agent_pb2.WindowBatch(windows=[
                        e2e._split_by(old if late else answer.occupancy, w) for w, (*_, late) in zip(windows, spans)])))
                elif answer.WhichOneof("body") == "ack" and answer.ack.acked_seq >= windows[-1].seq:
                    break
        finally:
            up.put(None)
            responses.cancel()
        self.scheduler.register(worker, gpus=GB)   # the stream's end took the worker's liveness: back

    def start_bridge(self) -> None:
        log = open(self.dir / "bridge.log", "a")
        self.bridge = subprocess.Popen([str(BIN / "pool-slurm"), "run", "--config", str(self.config)],
                                       stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop_bridge(self, kill: bool = False) -> None:
        if self.bridge is not None and self.bridge.poll() is None:
            (self.bridge.kill if kill else self.bridge.terminate)()
            self.bridge.wait(timeout=20)

    def log(self) -> str:
        parts = [(self.dir / "bridge.log").read_text() if (self.dir / "bridge.log").exists() else ""]
        parts.append(self.cluster.log("slurmctld"))
        return "\n".join(parts)[-6000:]


def bridge_config(directory: Path, scheduler, cluster_dir: Path, extra: str = "", pool_extra: str = "") -> Path:
    cert, key = scheduler.pki.files("operator")
    path = directory / "pool-slurm.toml"
    path.write_text(f"""
[pool]
scheduler = "{scheduler.address}"
ca = "{scheduler.pki.ca}"
cert = "{cert}"
key = "{key}"
{pool_extra}

[slurm]
conf = "{cluster_dir / 'slurm.conf'}"
cluster = "pooltest"
partitions = ["gpu"]

[bridge]
poll_ms = 200
socket = "{cluster_dir / 'gate.sock'}"
{"" if "final_wait_ms" in extra else "final_wait_ms = 0   # no agent streams after a release here"}
{extra}

[accounts.acctA]
tenant = "alpha"

[accounts.acctB]
tenant = "beta"
""")
    return path


REPO = HERE.parent.parent


@functools.cache
def python_for_all() -> str | None:
    """An interpreter any user may run pool-slurm's TaskEpilog with (from this checkout): slurmstepd
    runs it as the job's user, and this venv's interpreter may live where only root can reach."""
    for python in (sys.executable, "/usr/bin/python3"):
        try:
            done = subprocess.run(["runuser", "-u", "nobody", "--", python, "-c", "import pool_slurm.hooks"],
                                  capture_output=True, timeout=30, cwd="/", env={**os.environ, "PYTHONPATH": str(REPO)})
        except OSError:
            continue
        if done.returncode == 0:
            return python
    return None


def _task_epilog(where: Path, config: Path) -> Path:
    """The TaskEpilog wrapper: `pool-slurm` as any job user runs it (its configuration and log beside it)."""
    readable = where / "pool-slurm.toml"
    readable.write_text(config.read_text())
    readable.chmod(0o644)
    log = where / "task-epilog.log"
    log.touch()
    log.chmod(0o666)
    hook = where / "pool-slurm-task-epilog"
    hook.write_text(f"#!/bin/sh\nPOOL_SLURM_CONFIG={readable} PYTHONPATH={REPO} exec {python_for_all() or sys.executable} "
                    f"-m pool_slurm.main >>{log} 2>&1\n")
    hook.chmod(0o755)
    return hook


@pytest.fixture
def governed(cluster, tmp_path):
    """governed(extra="...", pool_extra="...") -> Governed: Pool, Slurm with the hooks, and the bridge
    running (extra: more lines of the bridge config's [bridge], pool_extra: of its [pool])."""
    _skip_without_slurm()
    made: list[Governed] = []

    def start(extra: str = "", bridge: bool = True, pool_extra: str = "") -> Governed:
        s = cluster(tree=TREE, hosts=("node1", "node2"))
        for node in ("node1", "node2"):
            s.register(node, gpus=GB)
        where = slurm_cluster.scratch()
        config = bridge_config(tmp_path, s, where, extra, pool_extra)
        hook = where / "pool-slurm-hook"
        hook.write_text(f"#!/bin/sh\nPOOL_SLURM_CONFIG={config} exec {BIN / 'pool-slurm'} "
                        f">>{tmp_path / 'hooks.log'} 2>&1\n")
        hook.chmod(0o755)
        task_epilog = _task_epilog(where, config)
        from pool_slurm.config import load
        from pool_slurm.main import job_submit_lua
        c = slurm_cluster.Cluster(where).write(prolog=str(hook), epilog=str(hook), task_epilog=str(task_epilog),
                                               job_submit=job_submit_lua(["gpu"], load(config).wake))
        g = Governed(s, c, tmp_path, config)
        made.append(g)
        c.start()
        if bridge:
            g.start_bridge()
        return g

    yield start
    for g in made:
        g.stop_bridge()
        g.cluster.remove()
