"""The stated limits that are counted rather than checked field by field:
per-principal rates (token buckets), per-principal budgets and per-role pools
of calls in progress, and the per-tenant cap on open claims. Their figures are
`[limits]` and `[principals.NAME]` in scheduler.toml (docs/OPERATIONS.md)."""

from __future__ import annotations

import asyncio
import time
import contextlib
import math
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Mapping

from scheduler.kernel import ClaimState, ClusterState
from scheduler.service.errors import Refused
from scheduler.service.principal import Budget, Principal

_OPEN = (ClaimState.PENDING, ClaimState.ADMITTED)


class RateLimiter:
    """One token bucket per key (a principal's name): `rate` tokens a second,
    at most `burst` saved up. A rate of 0 is unlimited."""

    def __init__(self, rate: int, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self._buckets: dict[str, tuple[float, float]] = {}   # key -> (tokens, at monotonic s)

    def _tokens(self, key: str, now_s: float, rate: int, burst: int) -> float:
        tokens, at = self._buckets.get(key, (float(burst), now_s))
        return min(float(burst), tokens + (now_s - at) * rate)

    def wait_s(self, key: str, n: int, now_s: float, rate: int | None = None, burst: int | None = None) -> float:
        """How long `key` must wait before `n` tokens are there (0: take them now,
        and they are taken). A request larger than the burst waits for a full bucket.
        `rate` and `burst`: the key's own, over the limiter's."""
        rate = self.rate if rate is None else rate
        burst = self.burst if burst is None else burst
        if not rate:
            return 0.0
        tokens = self._tokens(key, now_s, rate, burst)
        need = min(n, burst)
        if tokens >= need:
            self._buckets[key] = (tokens - need, now_s)
            return 0.0
        self._buckets[key] = (tokens, now_s)
        return (need - tokens) / rate

    async def paced(self, key: str, n: int, rate: int | None = None, burst: int | None = None) -> None:
        """Wait until `key` has taken `n` tokens: the pause, not a refusal, of every paced
        budget (calls_per_s, watch_statuses_per_s, windows_per_s). More than a burst is
        taken in parts, so a large request pays for all of it."""
        rate = self.rate if rate is None else rate
        burst = self.burst if burst is None else burst
        while n > 0 and rate:
            part = min(n, burst)
            while (wait := self.wait_s(key, part, time.monotonic(), rate, burst)) > 0:
                await asyncio.sleep(wait)
            n -= part

    def empty_s(self, key: str, now_s: float, rate: int | None = None, burst: int | None = None) -> float:
        """How long until `key` has a whole token (0: it has one now); nothing is taken."""
        rate = self.rate if rate is None else rate
        burst = self.burst if burst is None else burst
        if not rate:
            return 0.0
        return max(0.0, (1 - self._tokens(key, now_s, rate, burst)) / rate)

    def charge(self, key: str, n: int, now_s: float, rate: int, burst: int) -> None:
        """Take `n` tokens that were already spent, into debt if need be."""
        if rate:
            self._buckets[key] = (self._tokens(key, now_s, rate, burst) - n, now_s)


RETRY_AFTER = "pool-retry-after-ms"   # trailing metadata of a budget refusal: ms before a retry may pass
HOUR_S = 3600
# how deep a principal's receipts_per_hour bucket is: a minute's worth (at least one receipt). An
# hour-deep bucket let one tenant spend an hour's receipts (360,000) in seconds, the whole ledger's
# work for minutes (bench/abuse.py); a minute's still takes an array of thousands of claims at once
RECEIPT_BURST_S = 60


def receipt_burst(per_hour: int) -> int:
    """The receipts a principal may cause at once: RECEIPT_BURST_S of its receipts_per_hour."""
    return max(1, per_hour * RECEIPT_BURST_S // HOUR_S)

# calls of one principal whose handlers run at once, by role; the rest wait their turn (queued, not
# refused: `calls` bounds them). The event loop serves its tasks in turn, so a principal with many
# calls would otherwise take as many turns: this keeps one principal's share to a few turns a round.
RUNNING = {"tenant": 2, "auditor": 2, "witness": 2}
# a role's pool of calls in progress (limits.*_rpcs); tenants, auditors and witnesses share "clients"
POOL_OF_ROLE = {"agent": "agent", "operator": "operator", "health": "health"}


def limit_refusal(code: str, message: str, wait_s: float) -> Refused:
    return Refused(code, message, ((RETRY_AFTER, str(max(1, math.ceil(wait_s * 1000)))),))


class Admission:
    """Calls in progress and open streams per principal (its Budget) and per
    role pool, and receipts per principal per hour: what the authorization
    layer counts for every call before the handler runs. A principal over its
    own budget is refused PRINCIPAL_LIMIT; a pool that is full, SERVICE_BUSY;
    each with RETRY_AFTER. Another principal, or another pool, never notices."""

    def __init__(self, pools: Mapping[str, int]) -> None:
        self.pools = dict(pools)                 # pool -> calls in progress it may hold (0: unlimited)
        self.in_pool: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()     # principal -> calls in progress
        self.streams: Counter[str] = Counter()   # principal -> open streaming calls
        self._receipts = RateLimiter(0, 0)       # per principal; rates from each principal's budget
        self._begun = RateLimiter(0, 0)          # calls begun, per principal (Budget.calls_per_s)
        self._turns: dict[str, asyncio.Semaphore] = {}

    @contextlib.asynccontextmanager
    async def turn(self, principal: Principal | None) -> AsyncIterator[None]:
        """Hold one of the principal's RUNNING turns (at once for a role without a limit)."""
        running = RUNNING.get(principal.role) if principal is not None else None
        if not running:
            yield
            return
        turns = self._turns.get(principal.name)
        if turns is None:
            turns = self._turns[principal.name] = asyncio.Semaphore(running)
        async with turns:
            yield

    async def paced(self, principal: Principal) -> None:
        """Wait until `principal` may begin another call (Budget.calls_per_s, a
        second's worth at once): past its rate a call waits, counted in progress
        meanwhile, so that `calls` bounds how many wait. A client looping on
        calls refused at once would otherwise take the loop by their number."""
        rate = principal.budget.calls_per_s
        await self._begun.paced(principal.name, 1, rate, rate)

    @staticmethod
    def pool(role: str) -> str:
        return POOL_OF_ROLE.get(role, "clients")

    def enter(self, key: str, role: str, budget: Budget, streaming: bool) -> None:
        """Count a call in (Refused, counting nothing, when it is over a budget)."""
        pool = self.pool(role)
        if budget.calls and self.calls[key] >= budget.calls:
            raise limit_refusal("PRINCIPAL_LIMIT", f"{key!r} has {self.calls[key]} calls in progress, the most "
                                                   f"its budget allows (calls = {budget.calls})", 1.0)
        if streaming and budget.streams and self.streams[key] >= budget.streams:
            raise limit_refusal("PRINCIPAL_LIMIT", f"{key!r} has {self.streams[key]} streams open, the most its "
                                                   f"budget allows (streams = {budget.streams})", 1.0)
        if self.pools.get(pool) and self.in_pool[pool] >= self.pools[pool]:
            raise limit_refusal("SERVICE_BUSY", f"the {pool} pool has {self.in_pool[pool]} calls in progress, "
                                                f"its most (limits.{pool if pool != 'clients' else 'max_concurrent'}"
                                                f"_rpcs)", 1.0)
        self.calls[key] += 1
        self.in_pool[pool] += 1
        if streaming:
            self.streams[key] += 1

    def leave(self, key: str, role: str, streaming: bool) -> None:
        for counter, k in ((self.calls, key), (self.in_pool, self.pool(role))) + (
                ((self.streams, key),) if streaming else ()):
            counter[k] -= 1
            if counter[k] <= 0:
                del counter[k]

    def receipts_wait_s(self, principal: Principal, now_s: float) -> float:
        """How long until `principal` may cause a receipt again (0: now)."""
        per_hour = principal.budget.receipts_per_hour
        if not per_hour:
            return 0.0
        tokens = self._receipts._tokens(principal.name, now_s, per_hour / HOUR_S, receipt_burst(per_hour))
        return 0.0 if tokens >= 1 else (1 - tokens) * HOUR_S / per_hour

    def receipts(self, principal: Principal, n: int, now_s: float) -> None:
        """`principal`'s calls caused `n` receipts."""
        per_hour = principal.budget.receipts_per_hour
        self._receipts.charge(principal.name, n, now_s, per_hour / HOUR_S, receipt_burst(per_hour))

    def check_receipts(self, principal: Principal, now_s: float) -> None:
        wait = self.receipts_wait_s(principal, now_s)
        if wait:
            raise limit_refusal("PRINCIPAL_LIMIT", f"{principal.name!r} has caused the receipts its budget allows "
                                                   f"(receipts_per_hour = {principal.budget.receipts_per_hour})", wait)


class OpenClaims:
    """Open claims (pending or admitted) per tenant, for the cap. Counted from
    the state once when serving starts, then kept by the submissions the
    service accepts and the changes the engine commits."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._by_tenant: dict[str, set[str]] = {}
        self._tenant: dict[str, str] = {}

    def count(self, tenant: str) -> int:
        return len(self._by_tenant.get(tenant, ()))

    def full(self, tenant: str) -> bool:
        return bool(self.cap) and self.count(tenant) >= self.cap

    def opened(self, tenant: str, claim_id: str) -> None:
        self._by_tenant.setdefault(tenant, set()).add(claim_id)
        self._tenant[claim_id] = tenant

    def changed(self, state: ClusterState, claim_ids: Iterable[str]) -> None:
        """Claims whose status changed: those no longer open leave the count."""
        for claim_id in claim_ids:
            claim = state.claims.get(claim_id)
            if claim is not None and claim.state in _OPEN:
                self.opened(claim.tenant, claim_id)
            elif claim_id in self._tenant:
                self._by_tenant[self._tenant.pop(claim_id)].discard(claim_id)

    def rebuild(self, state: ClusterState) -> None:
        """Counted afresh from every claim (start-up: one walk of the claims,
        not a lookup of each by its id)."""
        self._by_tenant, self._tenant = {}, {}
        for claim in state.claims.values():
            if claim.state in _OPEN:
                self.opened(claim.tenant, claim.claim_id)
