"""/etc/pool/scheduler.toml: the schema is these dataclasses (and the kernel's
own Tenant, WorkClass and IdlePolicy records), read by protos.settings.

Every key is documented in docs/OPERATIONS.md. The tenant tree is validated by
the kernel's loader at start, so a bad tree stops the scheduler with the node
named, before anything is served.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from protos import settings
from protos.settings import ConfigError, natural, positive
from scheduler.kernel import ConfigApplied, IdlePolicy, Tenant, TreeError, WorkClass, load_tree
from scheduler.ledger import dcbor
from scheduler.ledger.keys import KeyFileError
from scheduler.ledger.note import NoteError, witness_keys
from scheduler.service.principal import INSECURE, ROLES, SCHEDULER, Budget, Principal

RESERVED_PRINCIPALS = (SCHEDULER.name, INSECURE.name)

DEFAULT_PATH = Path("/etc/pool/scheduler.toml")


@dataclass(frozen=True)
class Tls:
    """[server.tls]: PEM files, re-read on SIGHUP."""

    cert: Path
    key: Path
    client_ca: Path | None = None   # set: every caller must present a certificate this CA signed


@dataclass(frozen=True)
class Server:
    listen: str = "127.0.0.1:7070"     # loopback unless configured otherwise
    metrics: str = "127.0.0.1:9470"    # "" disables /metrics
    log_level: str = "info"
    advertise: str = ""                # the address standbys name in NOT_LEADER; "": listen
    tls: Tls | None = None
    insecure: bool = False             # development only: plaintext, loopback only, every caller an operator


# The budget of each role, unless [principals.NAME] says otherwise. Agents stream on one
# stream per host; tenants and auditors read and watch; an operator may need many calls at once.
# calls_per_s: a tenant's or auditor's calls begin at most 50 a second, paced, not refused (a program
# that needs more batches: SubmitMany, List pages): one tenant's eight loops of cheap calls (List pages,
# refused Plans, malformed bytes, Progress) began 240 a second and took the scheduler's whole core, and
# at 100 a second still half of it (bench/abuse.py)
ROLE_BUDGETS = MappingProxyType({
    "tenant": Budget(calls=64, streams=16, receipts_per_hour=360_000, calls_per_s=50),
    "auditor": Budget(calls=64, streams=16, receipts_per_hour=0, calls_per_s=50),
    "witness": Budget(calls=16, streams=4, receipts_per_hour=3_600, calls_per_s=20),
    "agent": Budget(calls=16, streams=4, receipts_per_hour=36_000),
    "operator": Budget(calls=1_024, streams=256, receipts_per_hour=0),
})
# claims a second a principal of the role may submit (Submit, SubmitMany, and each claim a Plan
# judges), unless [principals.NAME] submits_per_s says otherwise; a role not listed: limits.submits_per_s.
# A tenant's is a small share of what the scheduler decides in a second on a small machine, so that
# one tenant cannot take every decision: at 200 a tenant's SubmitMany and Plans of 1,000 on 50,000
# claims of its own were most of a 2-core scheduler's loop (bench/abuse.py). Its burst is ten seconds'
# worth, at most limits.submit_burst.
ROLE_SUBMITS = MappingProxyType({"tenant": 50})
# a caller of health, per certificate CN (declared or not: health answers anyone the TLS layer admits)
HEALTH_BUDGET = Budget(calls=16, streams=4, receipts_per_hour=0)


@dataclass(frozen=True)
class PrincipalEntry:
    """[principals.NAME]: NAME is a certificate's subject CN. A budget key left
    out is its role's (ROLE_BUDGETS; submits_per_s: ROLE_SUBMITS, else limits.submits_per_s)."""

    role: str
    tenants: tuple[str, ...] = ()     # for a tenant: the subtrees it may act in and read
    calls: int | None = None
    streams: int | None = None
    receipts_per_hour: int | None = None
    submits_per_s: int | None = None
    calls_per_s: int | None = None


@dataclass(frozen=True)
class Ledger:
    path: Path = Path("/var/lib/pool/ledger.sqlite")
    steward_key: Path = Path("/etc/pool/steward.key")
    # trusted witnesses' Ed25519 public keys: each a key file (PEM, raw or hex) or 64 hex digits
    witness_keys: tuple[str, ...] = ()
    checkpoint_every: int = 10_000   # receipts between signed checkpoints (start-up replays the tail); 0: none
    store: str = "sqlite"            # or "postgresql": a shared ledger, a leader and standbys
    dsn: str = ""                    # libpq connection string (postgresql); the password from PGPASSFILE/PGPASSWORD
    lease_ms: int = 5000             # postgresql: a leader silent this long loses the lock
    follow_ms: int = 200             # postgresql: how often a standby reads new receipts and tries the lock


@dataclass(frozen=True)
class Accounting:
    period_ns: int = 0   # 0: "none", one lifetime period
    epoch_ns: int = 0    # Unix ns at which period 0 starts


# The most a device may draw, in W, by device type (a GPU's name as NVML gives
# it, or "cpu" for a CPU package); "gpu" is any GPU type not listed. A
# window's µJ above duration × this is refused. The figures sit above each
# part's peak (an H200 peaks at ~700 W) to leave room for a counter that
# steps every ~100 ms, so a window may carry up to one step more than its span.
MAX_POWER_W = MappingProxyType({"NVIDIA H200": 1_000, "NVIDIA H100 80GB HBM3": 1_000, "gpu": 1_500,
                                "cpu": 1_000})


@dataclass(frozen=True)
class Limits:
    """What no caller may exceed (docs/OPERATIONS.md, "Limits"). 0 means
    unlimited for the rates and the open-claim cap."""

    # the gRPC server
    max_message_bytes: int = 4 << 20       # one request or answer
    # calls in progress, streams included, of tenants, auditors and witnesses together; agents,
    # operators and health have pools of their own beside it that those roles cannot take
    max_concurrent_rpcs: int = 10_000
    agent_rpcs: int = 4_096                # calls in progress of every agent together
    operator_rpcs: int = 2_048             # of every operator together
    health_rpcs: int = 1_024               # health checks and watches, from anyone
    # HTTP/2 streams one connection may open at once. Not 128: gRPC core counts a stream until the
    # event loop has reaped its finished call, so a busy scheduler refused 64 calls in flight at 128
    # (docs/OPERATIONS.md, Limits); what bounds a hostile client is max_concurrent_rpcs.
    max_streams_per_connection: int = 1024
    connection_idle_s: int = 300           # an idle connection is closed after this
    keepalive_s: int = 60                  # the server pings a quiet connection; a dead peer is dropped
    # what an agent may send
    max_windows_per_batch: int = 1_000     # an agent sends 500 (stream.batch_max): each batch is checked whole
    max_unacked_windows: int = 50_000      # counted on one stream but not yet acknowledged: reading pauses
    max_seq_advance: int = 1_000_000       # a batch's last seq at most this above the host's counted seq
    clock_skew_s: int = 10                 # a window may end at most this after the scheduler's clock
    max_window_age_s: int = 7 * 86_400     # and start at most this before it
    occupancy_grace_s: int = 60            # an occupancy stays good this long after its successor was sent
    max_power_w: Mapping[str, int] = field(default_factory=dict)  # over MAX_POWER_W, by device type
    # per principal, and per tenant
    submits_per_s: int = 1_000             # Submit calls per second per principal (token bucket)
    submit_burst: int = 10_000
    # windows per second per principal: the stream is paused past it. 1,000 is 100 devices at 10 Hz,
    # ~60 times an 8-GPU host's windows at the agent's default 1 s (with its 2 CPU packages); a burst
    # of ten seconds' worth takes a spool's catch-up at once. At 5,000 (burst 50,000) one compromised
    # agent's 1 µs windows were a third of the ledger's work and honest Submits waited (bench/abuse.py)
    windows_per_s: int = 1_000
    window_burst: int = 10_000
    max_open_claims_per_tenant: int = 100_000   # pending + admitted, per tenant (its own, not its subtree)
    watch_events: int = 1_000              # events one Watch may have waiting to be sent; past it: WATCH_LAGGED
    watch_bytes: int = 1 << 20             # and bytes
    # first statuses (EVENT_CURRENT) a principal's Watches send a second, together (a burst of one
    # second's worth); past it they wait. Each is a message of its own on the event loop (~130 µs):
    # 16 never-reading Watches of one tenant with 50,000 claims sent 160,000 in a minute, a third of
    # the loop (bench/abuse.py); at 1,000 a second they were still a tenth of it. A client after a big
    # tenant's state Lists it (a page a call). 0: unlimited
    watch_statuses_per_s: int = 500
    page_size: int = 500                   # Splits and the other paged answers, when page_size is 0
    max_page_size: int = 1_000
    # List's, when page_size is 0 (a List may ask up to the greater of this and max_page_size): each
    # page is one call, and a page also ends at LIST_PAGE_BYTES of statuses (service/claims.py)
    list_page_size: int = 5_000

    def power_w(self, device_type: str) -> int:
        """The ceiling for a device type: configured, else MAX_POWER_W, else its kind's."""
        table = {**MAX_POWER_W, **self.max_power_w}
        kind = "cpu" if device_type == "cpu" else "gpu"
        return table.get(device_type, table[kind])


@dataclass(frozen=True)
class WorkerOverride:
    """Operator overrides of what an agent reports; a field left out is the agent's."""

    cpu_millis: int | None = None
    memory_mb: int | None = None
    disk_mb: int | None = None
    max_concurrency: int | None = None


@dataclass(frozen=True)
class SchedulerConfig:
    tenants: tuple[Tenant, ...]
    server: Server = Server()
    ledger: Ledger = Ledger()
    accounting: Accounting = Accounting()
    work_classes: tuple[WorkClass, ...] = ()
    idle: IdlePolicy = IdlePolicy()
    workers: Mapping[str, WorkerOverride] = field(default_factory=dict)
    limits: Limits = Limits()
    splits_retention: int = 200_000   # split rows kept in memory for `poolctl splits`
    principals: Mapping[str, PrincipalEntry] = field(default_factory=dict)

    def config_event(self) -> ConfigApplied:
        """The configuration as the kernel records it, with a digest of its body."""
        event = ConfigApplied(self.tenants, self.accounting.period_ns, self.accounting.epoch_ns,
                              self.work_classes, self.idle)
        digest = hashlib.sha256(dcbor.encode(event.to_body())).digest()
        return ConfigApplied(self.tenants, self.accounting.period_ns, self.accounting.epoch_ns,
                             self.work_classes, self.idle, digest)


def _level(v: str) -> bool | str:
    return v in ("debug", "info", "warning", "error") or "must be debug, info, warning or error"


def _address(v: str) -> bool | str:
    host, sep, port = v.rpartition(":")
    return (bool(sep) and port.isdigit() and 0 < int(port) < 65536) or "must be HOST:PORT"


def _advertise(v: str) -> bool | str:
    if len(v) > 58:   # it travels as the lock session's application_name (63 bytes)
        return "must be at most 58 characters"
    return v == "" or _address(v)


CHECKS = {
    "server.listen": _address, "server.log_level": _level,
    "server.advertise": _advertise,
    "ledger.store": lambda v: v in ("sqlite", "postgresql") or 'must be "sqlite" or "postgresql"',
    "ledger.lease_ms": lambda v: v >= 300 or "must be ≥ 300",
    "ledger.follow_ms": positive,
    "server.metrics": lambda v: v == "" or _address(v),
    "ledger.checkpoint_every": natural, "accounting.period_ns": natural, "accounting.epoch_ns": natural,
    "tenants.guarantee_uj": natural, "tenants.guarantee_mdev": natural, "tenants.weight": positive,
    "tenants.borrow_limit_uj": natural, "tenants.lend_limit_uj": natural,
    "work_classes.required": lambda v: v >= 2 or "must be ≥ 2 (one run is not a sample)",
    "idle.window_ns": natural, "idle.thresholds.uw": natural,
    **{f"workers.{k}": natural for k in ("cpu_millis", "memory_mb", "disk_mb", "max_concurrency")},
    "splits_retention": positive,
    "principals.role": lambda v: v in ROLES or f"must be one of {', '.join(ROLES)}",
    **{f"principals.{f}": natural for f in ("calls", "streams", "receipts_per_hour", "submits_per_s",
                                            "calls_per_s")},
    **{f"limits.{f}": positive for f in (
        "max_message_bytes", "max_concurrent_rpcs", "agent_rpcs", "operator_rpcs", "health_rpcs",
        "max_streams_per_connection", "connection_idle_s",
        "keepalive_s", "max_windows_per_batch", "max_unacked_windows", "max_seq_advance", "max_window_age_s",
        "submit_burst", "window_burst", "watch_events", "watch_bytes", "page_size", "max_page_size",
        "list_page_size", "max_power_w")},
    **{f"limits.{f}": natural for f in ("clock_skew_s", "occupancy_grace_s", "submits_per_s", "windows_per_s",
                                        "max_open_claims_per_tenant", "watch_statuses_per_s")},
}


def is_loopback(address: str) -> bool:
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_security(config: SchedulerConfig, where: str) -> None:
    server = config.server
    if server.insecure and server.tls is not None:
        raise ConfigError(f"{where}: server.insecure and [server.tls] exclude each other: choose one")
    if server.insecure and not is_loopback(server.listen):
        raise ConfigError(f"{where}: server.insecure may only listen on a loopback address, not {server.listen!r}")
    if not server.insecure and server.tls is None:
        raise ConfigError(f"{where}: [server.tls] (cert, key, client_ca) is required; "
                          "for development on loopback only, set [server] insecure = true")
    nodes = {t.name for t in config.tenants}
    for name, entry in config.principals.items():
        if name in RESERVED_PRINCIPALS:
            raise ConfigError(f"{where}: principals.{name}: the name {name!r} is reserved")
        if entry.role == "tenant" and not entry.tenants:
            raise ConfigError(f"{where}: principals.{name}.tenants: a tenant principal needs at least one tenant")
        if entry.role != "tenant" and entry.tenants:
            raise ConfigError(f"{where}: principals.{name}.tenants: only a tenant principal has tenants")
        unknown = [t for t in entry.tenants if t not in nodes]
        if unknown:
            raise ConfigError(f"{where}: principals.{name}.tenants: {unknown[0]!r} is not in the tenant tree")
    for key in config.ledger.witness_keys:
        try:
            witness_keys(key)
        except (KeyFileError, NoteError) as exc:
            raise ConfigError(f"{where}: ledger.witness_keys: {exc}") from None


def trusted_witnesses(config: SchedulerConfig) -> frozenset:
    """PublicKeys (pool/1 statements) and, from vkeys, note.VKeys (cosignatures)."""
    return frozenset(k for text in config.ledger.witness_keys for k in witness_keys(text))


def budget(entry: PrincipalEntry) -> Budget:
    """A principal's budget: its role's (ROLE_BUDGETS), with its own keys over it."""
    role = ROLE_BUDGETS[entry.role]
    return Budget(role.calls if entry.calls is None else entry.calls,
                  role.streams if entry.streams is None else entry.streams,
                  role.receipts_per_hour if entry.receipts_per_hour is None else entry.receipts_per_hour,
                  role.calls_per_s if entry.calls_per_s is None else entry.calls_per_s)


def principals(config: SchedulerConfig) -> dict[str, Principal]:
    return {name: Principal(name, e.role, e.tenants, budget(e),
                            ROLE_SUBMITS.get(e.role) if e.submits_per_s is None else e.submits_per_s)
            for name, e in config.principals.items()}


def validate(config: SchedulerConfig, where: str) -> SchedulerConfig:
    try:
        load_tree(config.tenants)
    except TreeError as exc:
        raise ConfigError(f"{where}: tenants: {exc}") from None
    _check_security(config, where)
    names = [c.name for c in config.work_classes]
    if len(set(names)) != len(names) or "" in names:
        raise ConfigError(f"{where}: work_classes: every class needs a distinct, non-empty name")
    if config.ledger.store == "postgresql" and not config.ledger.dsn:
        raise ConfigError(f"{where}: ledger.dsn is required with store = \"postgresql\"")
    if "password" in config.ledger.dsn.lower() or re.search(r"://[^/@]*:[^/@]*@", config.ledger.dsn):
        # (a key=value password, or a URI's user:password@; said without echoing the DSN)
        raise ConfigError(f"{where}: ledger.dsn must not hold a password: use a password file "
                          "(PGPASSFILE, or passfile= in the DSN) or PGPASSWORD in the environment")
    limits = config.limits
    if limits.max_unacked_windows < limits.max_windows_per_batch:
        raise ConfigError(f"{where}: limits.max_unacked_windows must be ≥ limits.max_windows_per_batch")
    if limits.page_size > limits.max_page_size:
        raise ConfigError(f"{where}: limits.page_size must be ≤ limits.max_page_size")
    if config.idle.thresholds and not config.idle.window_ns:
        raise ConfigError(f"{where}: idle.window_ns must be positive when thresholds are set")
    return config


def load(path: Path) -> SchedulerConfig:
    return validate(settings.load(SchedulerConfig, path, CHECKS), str(path))
