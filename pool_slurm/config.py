"""pool-slurm's TOML configuration (docs/SLURM.md, "Configuration"). Every
mistake is refused at start with the key that is wrong."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from pool_slurm.jobs import Account, parse_energy

DEFAULT_PATH = Path("/etc/pool/slurm.toml")
ENV = "POOL_SLURM_CONFIG"
POLICIES = {
    "on_preempt": ("requeue", "cancel"),
    "on_unreachable": ("closed", "open"),
    "running_without_claim": ("requeue", "cancel", "report"),
}


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Config:
    scheduler: str
    ca: Path | None
    cert: Path | None
    key: Path | None
    slurm_conf: Path
    cluster: str
    partitions: tuple[str, ...]
    accounts: dict[str, Account]
    nodes: dict[str, str] = field(default_factory=dict)        # Slurm node -> Pool worker
    devices: dict[str, tuple[str, ...]] = field(default_factory=dict)   # worker -> device ids by Slurm index
    gpu_types: dict[str, str] = field(default_factory=dict)    # Slurm gres type -> Pool GPU type
    poll_ms: int = 250
    on_preempt: str = "requeue"
    on_unreachable: str = "closed"
    running_without_claim: str = "requeue"
    unreachable_after_ms: int = 5000
    timeout_s: float = 5.0
    log_level: str = "info"
    socket: Path = Path("/run/pool-slurm/gate.sock")
    wake: Path = Path("/run/pool-slurm/wake")   # job_submit.lua touches it: the bridge cycles at once
    # TaskEpilog's socket (mode 0666: the hook runs as the job's user; the bridge checks who asks)
    finish_socket: Path = Path("/run/pool-slurm/finish.sock")
    final_wait_ms: int = 3000   # how long a finishing job waits for its claim's figure to be final
    path: Path | None = None

    def tenant(self, account: str) -> str:
        """The tenant a Slurm account maps to ("" when unmapped): the tenant whose claim ids a
        job's claims are (claim ids are per tenant, RULES §11)."""
        mapped = self.accounts.get(account.lower())
        return mapped.tenant if mapped else ""

    def worker(self, node: str) -> str:
        return self.nodes.get(node, node)

    def node(self, worker: str) -> str:
        for node, w in self.nodes.items():
            if w == worker:
                return node
        return worker

    def env(self) -> dict[str, str]:
        """What a Slurm command run by the bridge or a hook needs."""
        return {**os.environ, "SLURM_CONF": str(self.slurm_conf)}


def _table(doc: dict, name: str) -> dict:
    value = doc.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"[{name}] must be a table")
    return value


def _milliseconds(path: Path, table: dict, key: str, default: int) -> int:
    value = table.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{path}: [bridge] {key} = {value!r}: a whole number of milliseconds, 0 or more")
    return value


def load(path: Path | None = None) -> Config:
    path = Path(path or os.environ.get(ENV) or DEFAULT_PATH)
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    pool, slurm, bridge = _table(doc, "pool"), _table(doc, "slurm"), _table(doc, "bridge")
    if not pool.get("scheduler"):
        raise ConfigError(f"{path}: [pool] scheduler (HOST:PORT) is required")
    tls = [pool.get(k) for k in ("ca", "cert", "key")]
    if any(tls) and not all(tls):
        raise ConfigError(f"{path}: [pool] needs all of ca, cert and key, or none (plaintext)")
    accounts = {}
    for name, entry in _table(doc, "accounts").items():
        if not isinstance(entry, dict) or not entry.get("tenant"):
            raise ConfigError(f"{path}: [accounts.{name}] needs tenant = \"NAME\"")
        estimate = entry.get("estimate")
        try:
            uj = parse_energy(str(estimate)) if estimate is not None else None
        except ValueError as exc:
            raise ConfigError(f"{path}: [accounts.{name}] estimate: {exc}") from None
        # Slurm lower-cases account names: so does the mapping
        accounts[name.lower()] = Account(entry["tenant"], uj, entry.get("work_class", ""))
    partitions = slurm.get("partitions", [])
    if not partitions or not all(isinstance(p, str) for p in partitions):
        raise ConfigError(f"{path}: [slurm] partitions must list the partitions Pool governs")
    settings = {}
    for key, allowed in POLICIES.items():
        value = bridge.get(key, allowed[0])
        if value not in allowed:
            raise ConfigError(f"{path}: [bridge] {key} = {value!r}: one of {', '.join(allowed)}")
        settings[key] = value
    devices = {w: tuple(ids) for w, ids in _table(doc, "devices").items()}
    socket = Path(bridge.get("socket", "/run/pool-slurm/gate.sock"))
    return Config(
        scheduler=pool["scheduler"], ca=Path(tls[0]) if tls[0] else None, cert=Path(tls[1]) if tls[1] else None,
        key=Path(tls[2]) if tls[2] else None,
        slurm_conf=Path(slurm.get("conf", "/etc/slurm/slurm.conf")), cluster=slurm.get("cluster", "slurm"),
        partitions=tuple(partitions), accounts=accounts, nodes=dict(_table(doc, "nodes")), devices=devices,
        gpu_types=dict(_table(doc, "gpu_types")), poll_ms=int(bridge.get("poll_ms", 250)),
        unreachable_after_ms=int(bridge.get("unreachable_after_ms", 5000)),
        timeout_s=float(pool.get("timeout_s", 5.0)), log_level=bridge.get("log_level", "info"), path=path,
        socket=socket, wake=Path(bridge.get("wake", socket.parent / "wake")),
        finish_socket=Path(bridge.get("finish_socket", socket.parent / "finish.sock")),
        final_wait_ms=_milliseconds(path, bridge, "final_wait_ms", 3000),
        **settings)
