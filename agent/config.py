"""/etc/pool/agent.toml: every key, its default and its check in one table.

docs/OPERATIONS.md documents the same keys; an unknown key, a wrong type or a
value out of range is refused at start with the file, the key and the reason.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, fields
from pathlib import Path

from agent.meters.base import COUNTER_UPDATE_NS
from protos import settings
from protos.settings import ConfigError, natural, positive  # noqa: F401 - ConfigError is re-exported

DEFAULT_PATH = Path("/etc/pool/agent.toml")
MIN_WINDOW_MS = COUNTER_UPDATE_NS // 1_000_000


def _window(v):
    return v >= MIN_WINDOW_MS or f"must be ≥ {MIN_WINDOW_MS} (the energy counter only advances every ~100 ms)"


def _level(v):
    return v in ("debug", "info", "warning", "error") or "must be debug, info, warning or error"


@dataclass(frozen=True)
class Meters:
    nvml: bool = True
    rapl: bool = True
    rapl_root: Path = Path("/sys/class/powercap")
    stall_ms: int = 500


@dataclass(frozen=True)
class Estimator:
    gpu_watts: int = 0   # 0: not configured, unmetered GPUs have no figure
    cpu_watts: int = 0


@dataclass(frozen=True)
class StreamTls:
    """[stream.tls]: PEM files. The agent's certificate's CN is its host id."""

    ca: Path                 # the CA that signed the scheduler's certificate
    cert: Path | None = None
    key: Path | None = None


@dataclass(frozen=True)
class Stream:
    batch_max: int = 500
    backoff_initial_ms: int = 500
    backoff_max_ms: int = 30_000
    drain_ms: int = 2_000  # on stop, how long unacknowledged windows may wait for their ack
    # a window the scheduler refuses (INVALID_WINDOW naming its seq) on this many consecutive
    # sessions is replaced in the spool by a GAP_REFUSED gap of the same seq, device and span
    refusals_before_gap: int = 3
    tls: StreamTls | None = None   # absent: plaintext, for a scheduler in insecure mode only


@dataclass(frozen=True)
class Spool:
    # Windows kept until acknowledged (state_dir/spool.sqlite, ~200 bytes each):
    # a day of 1 s windows for 11 devices. Past it, the oldest merge into gaps.
    max_windows: int = 1_000_000


@dataclass(frozen=True)
class Metrics:
    listen: str = "127.0.0.1:9464"   # "" disables /metrics


@dataclass(frozen=True)
class Capacity:
    cpu_millis: int | None = None
    memory_mb: int | None = None
    disk_mb: int | None = None
    gpu_mdev: int | None = None
    gpu_types: tuple[str, ...] | None = None
    max_concurrency: int | None = None
    disk_path: str = "/"

    def overrides(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "disk_path"}


@dataclass(frozen=True)
class Config:
    host_id: str = ""
    scheduler: str = ""
    window_ms: int = 1000
    state_dir: Path = Path("/var/lib/pool-agent")
    log_level: str = "info"
    meters: Meters = Meters()
    estimator: Estimator = Estimator()
    stream: Stream = Stream()
    spool: Spool = Spool()
    metrics: Metrics = Metrics()
    capacity: Capacity = Capacity()

    @property
    def window_ns(self) -> int:
        return self.window_ms * 1_000_000

    @property
    def host(self) -> str:
        return self.host_id or socket.gethostname()


# Checks beyond the type, keyed "section.key".
CHECKS = {
    "window_ms": _window, "log_level": _level,
    "meters.stall_ms": positive, "estimator.gpu_watts": natural, "estimator.cpu_watts": natural,
    "spool.max_windows": positive, "stream.batch_max": positive,
    "stream.backoff_initial_ms": positive, "stream.backoff_max_ms": positive, "stream.drain_ms": natural,
    "stream.refusals_before_gap": positive,
    **{f"capacity.{k}": natural for k in ("cpu_millis", "memory_mb", "disk_mb", "gpu_mdev", "max_concurrency")},
}


def load(path: Path | None) -> Config:
    """The configuration at `path`; defaults when `path` is None, or is the
    default path and absent (an agent with no file runs on defaults)."""
    if path is None or (path == DEFAULT_PATH and not path.exists()):
        return Config()
    return settings.load(Config, path, CHECKS)
