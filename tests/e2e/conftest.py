"""Real processes on loopback: a pool-scheduler, pool-agents replaying the
bundled trace, and poolctl, each a subprocess as an operator would run it.

Every call goes over mutual TLS with a development PKI made per test
(scheduler.ctl.certs), as a declared principal:
- `s.claims`, `s.ops`, `s.poolctl()`, `s.json()`: the operator;
  `s.as_principal(NAME).library()`: the client library (pool_client) as NAME;
- `s.agents` and `s.register(host)`: the agent of the host named in the
  request (a Register's host_id, a Stream's first Hello), each with its own
  certificate; hosts outside AGENT_HOSTS get a certificate nobody declared
  (`s.declare(host)` declares one; `cluster.agent(s, host)` does it itself);
- `s.as_principal(NAME)`: the same stubs and poolctl as any other principal:
  "operator", "auditor", "witness", one tenant principal per tenant of the
  tree (named as the tenant, reaching its subtree), an agent per host, or
  any CN at all (a certificate from the same CA for an undeclared name);
- `cluster(insecure=True)`: `[server] insecure = true`, plaintext, no PKI.
"""

from __future__ import annotations

import json
import queue
from itertools import chain
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import pool_client

from protos.energy import Grade, split, with_unallocated
from protos.pool.v1 import agent_pb2, agent_pb2_grpc, claims_pb2_grpc, ops_pb2, ops_pb2_grpc, types_pb2
from scheduler.ctl import certs
from scheduler.ledger import keys, note

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


AGENT_HOSTS = ("w1", "w2", "w3", "h1", "h2", "host-a", "host-b", "ghost")
ROLES = {"operator": "operator", "auditor": "auditor", "witness": "witness"}


def principals_toml(tree: str, hosts: tuple[str, ...] = AGENT_HOSTS) -> str:
    """[principals.*]: an operator, an auditor, a witness, a tenant principal per
    tenant (named as the tenant) and an agent per host."""
    declared = {**ROLES, **dict.fromkeys(hosts, "agent")}
    lines = [f'[principals."{name}"]\nrole = "{role}"' for name, role in declared.items()]
    lines += [f'[principals."{t["name"]}"]\nrole = "tenant"\ntenants = ["{t["name"]}"]'
              for t in tomllib.loads(tree).get("tenants", [])]
    return "\n".join(lines) + "\n"


class Pki:
    """A CA, the scheduler's certificate for loopback, and client certificates made on demand."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        if not (directory / "ca.pem").exists():
            certs.make_ca(directory)
            certs.make_server(directory, ("127.0.0.1", "localhost", "::1"))
        self.ca = directory / "ca.pem"

    def files(self, principal: str) -> tuple[Path, Path]:
        cert, key = self.dir / f"{principal}.pem", self.dir / f"{principal}.key"
        if not cert.exists():
            certs.make_client(self.dir, principal)
        return cert, key

    def credentials(self, principal: str) -> grpc.ChannelCredentials:
        cert, key = self.files(principal)
        return grpc.ssl_channel_credentials(self.ca.read_bytes(), key.read_bytes(), cert.read_bytes())

    def env(self, principal: str) -> dict[str, str]:
        cert, key = self.files(principal)
        return {"POOL_CA": str(self.ca), "POOL_CERT": str(cert), "POOL_KEY": str(key)}


class Caller:
    """Stubs and poolctl as one principal (None: plaintext, for insecure mode)."""

    def __init__(self, scheduler: Scheduler, principal: str | None) -> None:
        self.scheduler, self.principal = scheduler, principal
        self.channel = self.connect(scheduler.address)
        self.claims = claims_pb2_grpc.ClaimsStub(self.channel)
        self.ops = ops_pb2_grpc.OperationsStub(self.channel)
        self.agents = agent_pb2_grpc.AgentServiceStub(self.channel)

    def connect(self, address: str) -> grpc.Channel:
        """A channel to `address` as this principal (for FailoverChannel(addresses, connect))."""
        pki = self.scheduler.pki
        if pki is None or self.principal is None:
            return grpc.insecure_channel(address)
        return grpc.secure_channel(address, pki.credentials(self.principal))

    def library(self, *addresses: str, **kwargs) -> pool_client.Client:
        """The client library as this principal, to `addresses` (default: this scheduler's);
        kwargs as pool_client.Client's (tenant=, timeout=, deadline=)."""
        pki, listed = self.scheduler.pki, list(addresses) or [self.scheduler.address]
        if pki is None or self.principal is None:
            return pool_client.Client(listed, **kwargs)
        cert, key = pki.files(self.principal)
        return pool_client.Client(listed, ca=str(pki.ca), cert=str(cert), key=str(key), **kwargs)

    def env(self) -> dict[str, str]:
        pki = self.scheduler.pki
        tls = pki.env(self.principal) if pki is not None and self.principal else {}
        return {**{k: v for k, v in os.environ.items() if k not in ("POOL_CA", "POOL_CERT", "POOL_KEY")},
                "POOL_SCHEDULER": self.scheduler.address, **tls}

    def poolctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([str(BIN / "poolctl"), *args], capture_output=True, text=True, timeout=60,
                              env=self.env())
        if check:
            assert done.returncode == 0, done.stderr
        return done

    def json(self, *args: str) -> dict:
        return json.loads(self.poolctl(*args, "-o", "json").stdout)


class AgentStubs:
    """AgentService as the agent of the host each request names."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    def _as(self, host: str) -> agent_pb2_grpc.AgentServiceStub:
        return self._scheduler.as_principal(host).agents

    def Register(self, request: agent_pb2.RegisterRequest, **kwargs):  # noqa: N802 - a stub's method name
        return self._as(request.host_id).Register(request, **kwargs)

    def Stream(self, messages, **kwargs):  # noqa: N802
        messages = iter(messages)
        first = next(messages, None)
        host = first.hello.host_id if first is not None and first.WhichOneof("body") == "hello" else "operator"
        # chained, not listed: a caller's stream may go on for as long as the call does
        return self._as(host).Stream(chain([first], messages) if first is not None else iter(()), **kwargs)


def _split_by(occupancy: agent_pb2.Occupancy, window: agent_pb2.Window) -> agent_pb2.Window:
    """`window` with its shares as the agent's split by `occupancy` makes them."""
    if not window.HasField("uj"):
        return window
    described = {d.device_id: d for d in occupancy.devices}
    device = described.get(window.device_id)
    weights = with_unallocated(device.capacity, dict(device.occupants)) if device else {"unallocated": 1}
    out = agent_pb2.Window()
    out.CopyFrom(window)
    out.occupancy_version = occupancy.version
    del out.shares[:]
    out.shares.extend(types_pb2.Share(occupant=s.occupant, uj=s.uj, grade=int(s.grade))
                      for s in split(window.uj, weights, Grade(window.grade)))
    return out


def wait_for(what: str, ready: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Scheduler:
    """One pool-scheduler on a fixed port and ledger, restartable."""

    def __init__(self, workdir: Path, tree: str = TREE, metrics: str = "", checkpoint_every: int = 0, *,
                 dsn: str = "", name: str = "scheduler", lease_ms: int = 1500, insecure: bool = False,
                 hosts: tuple[str, ...] = AGENT_HOSTS, extra: str = "") -> None:
        """With `dsn`, the ledger is shared in PostgreSQL (every scheduler of the
        same workdir uses one steward key and one PKI); `name` tells their files apart."""
        self.dir, self.name, self.metrics_address = workdir, name, metrics
        self.address = f"127.0.0.1:{free_port()}"
        self.ledger = workdir / "ledger.sqlite"
        if not (workdir / "steward.key").exists():
            keys.write_pair(keys.generate(), workdir / "steward")
        self.steward = keys.load_signing_key(workdir / "steward.key")
        self.pki = None if insecure else Pki(workdir / "pki")
        self.witness_key = keys.generate()
        self.witness_vkey = note.VKey("witness.test/w1", note.COSIGNATURE_V1, self.witness_key.public).text()
        self.config = workdir / f"{name}.toml"
        shared = f'store = "postgresql"\ndsn = "{dsn}"\nlease_ms = {lease_ms}\nfollow_ms = 100\n' if dsn else ""
        security = "insecure = true" if insecure else f"""
[server.tls]
cert = "{workdir / 'pki' / 'server.pem'}"
key = "{workdir / 'pki' / 'server.key'}"
client_ca = "{workdir / 'pki' / 'ca.pem'}"
"""
        self.config.write_text(f"""
[server]
listen = "{self.address}"
metrics = "{metrics}"
log_level = "warning"
{security}
[ledger]
path = "{self.ledger}"
steward_key = "{workdir / 'steward.key'}"
checkpoint_every = {checkpoint_every}
witness_keys = ["{self.witness_key.public.raw.hex()}", "{self.witness_vkey}"]
{shared}{tree}
{'' if insecure else principals_toml(tree, hosts)}
{extra}""")
        self.process: subprocess.Popen | None = None
        self._callers: dict[str | None, Caller] = {}
        self.operator = self.as_principal("operator")
        self.channel, self.claims, self.ops = self.operator.channel, self.operator.claims, self.operator.ops
        self.agents = AgentStubs(self)

    def as_principal(self, name: str) -> Caller:
        """Stubs and poolctl as principal `name` (any CN; declared or not)."""
        key = None if self.pki is None else name
        if key not in self._callers:
            self._callers[key] = Caller(self, key)
        return self._callers[key]

    def reload(self) -> None:
        """SIGHUP: the scheduler re-reads [principals], witness keys and TLS files."""
        assert self.process is not None
        self.process.send_signal(signal.SIGHUP)

    def declare(self, name: str, role: str = "agent") -> None:
        """Declare principal `name` (e.g. an agent for a host outside AGENT_HOSTS), reloading a
        running scheduler and waiting until it knows the name."""
        if self.pki is None or f'[principals."{name}"]' in self.config.read_text():
            return
        with open(self.config, "a") as config:
            config.write(f'\n[principals."{name}"]\nrole = "{role}"\n')
        if self.process is None or self.process.poll() is not None:
            return
        self.reload()

        def known() -> bool:
            try:   # a call this role may not make: ROLE_NOT_ALLOWED once declared, UNKNOWN_PRINCIPAL before
                self.as_principal(name).ops.Reclaim(ops_pb2.ReclaimRequest(), timeout=5)
            except grpc.RpcError as error:
                return not (error.details() or "").startswith("UNKNOWN_PRINCIPAL")
            return True
        wait_for(f"the scheduler to know {name!r}", known)

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
        """A worker as its agent would register it (with its certificate), without its stream."""
        devices = [types_pb2.DeviceMeter(device_id=f"{host}-gpu{i}", kind=types_pb2.GPU, device_type="NVIDIA H200")
                   for i in range(gpus)]
        capacity = types_pb2.Capacity(resources=types_pb2.Resources(cpu_millis=cpu_millis, memory_mb=1 << 20,
                                                                    disk_mb=1 << 20, gpu_mdev=1000 * gpus))
        self.agents.Register(agent_pb2.RegisterRequest(host_id=host, capacity=capacity, devices=devices), timeout=10)

    def stream(self, host: str, windows: list) -> None:
        """Stream `windows` as host's agent would (Hello, one batch), until the
        scheduler acknowledges them; the stream then closes. As an agent does,
        each window with a figure is split by the occupancy the scheduler sends
        first (RULES §2), and names its version: the scheduler refuses shares
        that are not that split (evidence.py)."""
        up: queue.Queue = queue.Queue()
        up.put(agent_pb2.AgentMessage(hello=agent_pb2.Hello(host_id=host)))
        responses = self.agents.Stream(iter(up.get, None), timeout=10)
        try:
            for answer in responses:
                if answer.WhichOneof("body") == "occupancy":
                    up.put(agent_pb2.AgentMessage(batch=agent_pb2.WindowBatch(
                        windows=[_split_by(answer.occupancy, w) for w in windows])))
                elif answer.WhichOneof("body") == "ack" and windows and answer.ack.acked_seq >= windows[-1].seq:
                    break
        finally:
            up.put(None)
            responses.cancel()

    def log(self) -> str:
        return (self.dir / f"{self.name}.log").read_text()

    def env(self) -> dict[str, str]:
        """The environment poolctl runs in as the operator: POOL_SCHEDULER, POOL_CA/CERT/KEY."""
        return self.operator.env()

    def connect(self, address: str) -> grpc.Channel:
        """A channel to any scheduler's address as the operator."""
        return self.operator.connect(address)

    def poolctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.operator.poolctl(*args, check=check)

    def json(self, *args: str) -> dict:
        return self.operator.json(*args)


class Agent:
    def __init__(self, workdir: Path, scheduler: Scheduler, host: str, speed: float, address: str = "",
                 args: tuple = (), toml: str = "", metrics: str = "") -> None:
        self.state = state = workdir / f"agent-{host}"   # its state_dir, the spool in it
        config = workdir / f"agent-{host}.toml"
        scheduler.declare(host)
        tls = ""
        if scheduler.pki is not None:
            cert, key = scheduler.pki.files(host)
            tls = f'[stream.tls]\nca = "{scheduler.pki.ca}"\ncert = "{cert}"\nkey = "{key}"\n'
        config.write_text(f'host_id = "{host}"\nscheduler = "{address or scheduler.address}"\nstate_dir = "{state}"\n'
                          f'log_level = "info"\n[metrics]\nlisten = "{metrics}"\n[stream]\nbackoff_max_ms = 500\ndrain_ms = 30000\n'
                          + toml + "\n" + tls)
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


@pytest.fixture(scope="session")
def harness() -> SimpleNamespace:
    """This module's names, for test modules (importlib mode cannot import conftest)."""
    return SimpleNamespace(TREE=TREE, Scheduler=Scheduler, wait_for=wait_for)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Callable[..., Scheduler]]:
    """cluster() starts a scheduler; cluster.agent(...) starts agents beside it."""
    started: list = []

    def start(tree: str = TREE, metrics: str = "", checkpoint_every: int = 0, serving: bool = True,
              **kwargs) -> Scheduler:
        """kwargs: dsn=, name=, lease_ms= for schedulers over one PostgreSQL ledger; insecure=,
        hosts=, extra= (more configuration text) for the scheduler's security."""
        scheduler = Scheduler(tmp_path, tree, metrics, checkpoint_every, **kwargs).start(serving)
        started.append(scheduler)
        return scheduler

    def agent(scheduler: Scheduler, host: str = "host-a", speed: float = 20.0, address: str = "",
              args: tuple = (), toml: str = "", metrics: str = "") -> Agent:
        """`toml`: more agent.toml, appended (after its [stream] section)."""
        a = Agent(tmp_path, scheduler, host, speed, address, args, toml, metrics)
        started.append(a)
        return a

    start.agent = agent  # type: ignore[attr-defined]
    yield start
    for thing in reversed(started):
        thing.stop()
