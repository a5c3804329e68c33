"""Real processes on loopback: a pool-scheduler, pool-agents replaying the
bundled trace, and poolctl, each a subprocess as an operator would run it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.pool.v1 import agent_pb2, agent_pb2_grpc, claims_pb2_grpc, ops_pb2_grpc, types_pb2
from scheduler.ledger import keys

BIN = Path(sys.executable).parent
J = 1_000_000

TREE = """
[[tenants]]
name = "root"
guarantee_uj = 100_000_000_000
guarantee_mdev = 2000

[[tenants]]
name = "alpha"
parent = "root"
guarantee_uj = 60_000_000_000
guarantee_mdev = 1000

[[tenants]]
name = "beta"
parent = "root"
guarantee_uj = 40_000_000_000
guarantee_mdev = 1000
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, ready: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Scheduler:
    """One pool-scheduler on a fixed port and ledger, restartable."""

    def __init__(self, workdir: Path, tree: str = TREE, metrics: str = "", checkpoint_every: int = 0, *,
                 dsn: str = "", name: str = "scheduler", lease_ms: int = 1500) -> None:
        """With `dsn`, the ledger is shared in PostgreSQL (every scheduler of the
        same workdir uses one steward key); `name` tells their files apart."""
        self.dir, self.name = workdir, name
        self.address = f"127.0.0.1:{free_port()}"
        self.ledger = workdir / "ledger.sqlite"
        if not (workdir / "steward.key").exists():
            keys.write_pair(keys.generate(), workdir / "steward")
        self.steward = keys.load_signing_key(workdir / "steward.key")
        self.config = workdir / f"{name}.toml"
        shared = f'store = "postgresql"\ndsn = "{dsn}"\nlease_ms = {lease_ms}\nfollow_ms = 100\n' if dsn else ""
        self.config.write_text(f"""
[server]
listen = "{self.address}"
metrics = "{metrics}"
log_level = "warning"

[ledger]
path = "{self.ledger}"
steward_key = "{workdir / 'steward.key'}"
checkpoint_every = {checkpoint_every}
{shared}{tree}""")
        self.process: subprocess.Popen | None = None
        self.channel = grpc.insecure_channel(self.address)
        self.claims = claims_pb2_grpc.ClaimsStub(self.channel)
        self.ops = ops_pb2_grpc.OperationsStub(self.channel)
        self.agents = agent_pb2_grpc.AgentServiceStub(self.channel)

    def start(self, serving: bool = True) -> Scheduler:
        """Start and wait until it serves (a standby: until it answers health)."""
        log = open(self.dir / f"{self.name}.log", "a")
        self.process = subprocess.Popen([str(BIN / "pool-scheduler"), "--config", str(self.config)],
                                        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for("the scheduler to serve", self.serving if serving else lambda: self.health() is not None)
        return self

    def health(self) -> int | None:
        try:
            return health_pb2_grpc.HealthStub(self.channel).Check(health_pb2.HealthCheckRequest(), timeout=1).status
        except grpc.RpcError:
            return None

    def serving(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"pool-scheduler exited {self.process.returncode}: {self.log()}")
        try:
            answer = health_pb2_grpc.HealthStub(self.channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
        except grpc.RpcError:
            return False
        return answer.status == health_pb2.HealthCheckResponse.SERVING

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> int:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.terminate()
        return self.process.wait(timeout=20)

    def register(self, host: str = "w1", cpu_millis: int = 64_000, gpus: int = 2) -> None:
        """A worker as an agent would register it, without its stream."""
        devices = [types_pb2.DeviceMeter(device_id=f"{host}-gpu{i}", kind=types_pb2.GPU, device_type="NVIDIA H200")
                   for i in range(gpus)]
        capacity = types_pb2.Capacity(resources=types_pb2.Resources(cpu_millis=cpu_millis, memory_mb=1 << 20,
                                                                    disk_mb=1 << 20, gpu_mdev=1000 * gpus))
        self.agents.Register(agent_pb2.RegisterRequest(host_id=host, capacity=capacity, devices=devices), timeout=10)

    def log(self) -> str:
        return (self.dir / f"{self.name}.log").read_text()

    def poolctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([str(BIN / "poolctl"), *args], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "POOL_SCHEDULER": self.address})
        if check:
            assert done.returncode == 0, done.stderr
        return done

    def json(self, *args: str) -> dict:
        return json.loads(self.poolctl(*args, "-o", "json").stdout)


class Agent:
    def __init__(self, workdir: Path, scheduler: Scheduler, host: str, speed: float, address: str = "",
                 args: tuple = (), toml: str = "") -> None:
        state = workdir / f"agent-{host}"
        config = workdir / f"agent-{host}.toml"
        config.write_text(f'host_id = "{host}"\nscheduler = "{address or scheduler.address}"\nstate_dir = "{state}"\n'
                          'log_level = "info"\n[metrics]\nlisten = ""\n[stream]\nbackoff_max_ms = 500\ndrain_ms = 30000\n' + toml)
        self.log_path = workdir / f"agent-{host}.log"
        self.process = subprocess.Popen(
            [str(BIN / "pool-agent"), "--config", str(config), "--replay", "bundled", "--replay-speed", str(speed),
             *args], stdout=open(self.log_path, "a"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Callable[..., Scheduler]]:
    """cluster() starts a scheduler; cluster.agent(...) starts agents beside it."""
    started: list = []

    def start(tree: str = TREE, metrics: str = "", checkpoint_every: int = 0, serving: bool = True,
              **shared) -> Scheduler:
        """`shared`: dsn=, name=, lease_ms= for schedulers over one PostgreSQL ledger."""
        scheduler = Scheduler(tmp_path, tree, metrics, checkpoint_every, **shared).start(serving)
        started.append(scheduler)
        return scheduler

    def agent(scheduler: Scheduler, host: str = "host-a", speed: float = 20.0, address: str = "",
              args: tuple = (), toml: str = "") -> Agent:
        """`toml`: more agent.toml, appended (after its [stream] section)."""
        a = Agent(tmp_path, scheduler, host, speed, address, args, toml)
        started.append(a)
        return a

    start.agent = agent  # type: ignore[attr-defined]
    yield start
    for thing in reversed(started):
        thing.stop()
