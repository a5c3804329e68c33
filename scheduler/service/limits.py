"""The stated limits that are counted rather than checked field by field:
per-principal rates (token buckets) and the per-tenant cap on open claims.
Their figures are `[limits]` in scheduler.toml (docs/OPERATIONS.md)."""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.kernel import ClaimState, ClusterState

_OPEN = (ClaimState.PENDING, ClaimState.ADMITTED)


class RateLimiter:
    """One token bucket per key (a principal's name): `rate` tokens a second,
    at most `burst` saved up. A rate of 0 is unlimited."""

    def __init__(self, rate: int, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self._buckets: dict[str, tuple[float, float]] = {}   # key -> (tokens, at monotonic s)

    def wait_s(self, key: str, n: int, now_s: float) -> float:
        """How long `key` must wait before `n` tokens are there (0: take them now,
        and they are taken). A request larger than the burst waits for a full bucket."""
        if not self.rate:
            return 0.0
        tokens, at = self._buckets.get(key, (float(self.burst), now_s))
        tokens = min(float(self.burst), tokens + (now_s - at) * self.rate)
        need = min(n, self.burst)
        if tokens >= need:
            self._buckets[key] = (tokens - need, now_s)
            return 0.0
        self._buckets[key] = (tokens, now_s)
        return (need - tokens) / self.rate


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
        self._by_tenant, self._tenant = {}, {}
        self.changed(state, state.claims.keys())
