"""Who is calling: the principal that authenticated the call in progress.

The authorization layer (one interceptor over every RPC) sets it for the
duration of a call; everything downstream that needs the caller — the actor
written on each receipt, per-principal rate limits — reads it with `caller()`
instead of having it threaded through every signature. Work the scheduler
does on its own (the period tick, start-up) runs as `SCHEDULER`.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

from scheduler.kernel import ClusterState

ROLES = ("tenant", "operator", "agent", "auditor", "witness")


@dataclass(frozen=True, slots=True)
class Budget:
    """A principal's share of the service (docs/OPERATIONS.md, "Budgets"): what
    one principal may hold or use, on top of the global caps. 0: unlimited."""

    calls: int               # calls in progress, streams included
    streams: int             # open streaming calls (Watch, an agent's Stream, LedgerExport, health Watch)
    receipts_per_hour: int   # receipts its calls cause, per hour (a token bucket a minute deep: limits.receipt_burst)
    calls_per_s: int = 0     # calls it may begin a second (a second's worth at once); past it a call waits


UNLIMITED = Budget(0, 0, 0)


@dataclass(frozen=True, slots=True)
class Principal:
    name: str                      # a certificate's subject CN, as declared in [principals.NAME]
    role: str                      # one of ROLES, or "scheduler" for the scheduler's own work
    tenants: tuple[str, ...] = ()  # for a tenant: the subtrees it may act in and read
    budget: Budget = UNLIMITED     # [principals.NAME] over its role's (config.ROLE_BUDGETS)
    submits_per_s: int | None = None   # its own (config.ROLE_SUBMITS or [principals.NAME]); None: limits'



SCHEDULER = Principal("pool-scheduler", "scheduler")
# every caller in `[server] insecure = true` mode (development, loopback only)
INSECURE = Principal("insecure", "operator")

_CALLER: ContextVar[Principal] = ContextVar("pool_caller", default=SCHEDULER)


def caller() -> Principal:
    """The principal of the call in progress (SCHEDULER outside any call)."""
    return _CALLER.get()


def set_caller(principal: Principal):
    """Make `principal` the caller for the current task; returns the token to reset."""
    return _CALLER.set(principal)


def reset_caller(token) -> None:
    _CALLER.reset(token)


def in_reach(principal: Principal, state: ClusterState, tenant: str) -> bool:
    """A tenant node inside one of the principal's subtrees."""
    tree = state.tree
    return tree is not None and tenant in tree.nodes and not set(tree.path(tenant)).isdisjoint(principal.tenants)
