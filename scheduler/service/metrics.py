"""The scheduler's Prometheus metrics. One registry per process, so tests can
run several schedulers side by side without colliding."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server


@dataclass
class SchedulerMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.admissions = Counter("pool_admissions", "Claims admitted", registry=r)
        self.refusals = Counter("pool_refusals", "Claims refused or left pending, by reason", ["reason"], registry=r)
        self.settlements = Counter("pool_settlements", "Claims settled, by final state", ["state"], registry=r)
        self.overruns = Counter("pool_overruns", "Claims whose measured energy passed their hold", registry=r)
        self.usage_uj = Gauge("pool_tenant_usage_uj", "Tenant usage in µJ (subtree)", ["tenant"], registry=r)
        self.guarantee_uj = Gauge("pool_tenant_guarantee_uj", "Tenant guarantee in µJ", ["tenant"], registry=r)
        self.ledger_length = Gauge("pool_ledger_length", "Receipts in the ledger", registry=r)
        self.replay_seconds = Gauge("pool_replay_seconds", "Start-up verification and replay time", registry=r)
        self.windows = Counter("pool_windows_ingested", "Agent windows counted (de-duplicated)", registry=r)
        self.duplicate_windows = Counter("pool_windows_duplicate", "Agent windows already counted (resends)",
                                         registry=r)
        self.agents_live = Gauge("pool_agents_live", "Agents with an open stream", registry=r)

    def serve(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        start_http_server(int(port), addr=host or "127.0.0.1", registry=self.registry)
