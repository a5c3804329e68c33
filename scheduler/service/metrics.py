"""The scheduler's Prometheus metrics. One registry per process, so tests can
run several schedulers side by side without colliding.

Counters follow committed events. Per-tenant usage and guarantee, pending
claims by reason, and each host's unaccounted device time and lost windows
(from the gaps its agent reported) are read from the state when Prometheus
scrapes, so no decision pays for them.

Every series a dashboard panel reads exists from the start, at 0: a
refusal counter for every code and refusal reason, a settlement counter for
every way a claim settles, pending claims for every reason a claim can wait,
and unaccounted seconds for every registered host and gap reason. A healthy
or idle cluster shows 0, not "No data" (tests/e2e/test_dashboard.py).
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from protos.energy import NS_PER_S, GapReason
from protos.pool.v1 import types_pb2
from scheduler.kernel import ClaimAdmitted, ClaimRefused, ClaimVerdict, ClusterState, Event, IdleVerdict, Reason
from scheduler.kernel.events import Preempted, Reclaimed, Released, Settled
from scheduler.service.windows.projections import Observed

WAIT_BUCKETS_S = (0.01, 0.1, 1, 10, 60, 300, 1800, 3600, 6 * 3600, 86400)
# the labels exported at 0 from the start: every code a request is refused with, and
# the reason a pass refuses a claim; every way a claim settles; every reason a claim waits
REFUSAL_LABELS = tuple(v.name for v in types_pb2.ErrorCode.DESCRIPTOR.values if v.number) + \
    (Reason.GANG_NEVER_FITS.name,)
SETTLEMENT_KINDS = (Released.kind, Preempted.kind, Reclaimed.kind)
WAITING_REASONS = tuple(r.name for r in Reason if r not in (Reason.REASON_UNSPECIFIED, Reason.ADMISSIBLE))


class SchedulerMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.admissions = Counter("pool_admissions", "Claims admitted", registry=r)
        self.refusals = Counter("pool_refusals", "Requests and claims refused, by stable code or reason",
                                ["reason"], registry=r)
        self.settlements = Counter("pool_settlements", "Claims settled, by how", ["kind"], registry=r)
        self.overruns = Counter("pool_overruns", "Claims settled with measured energy above their hold",
                                registry=r)
        self.ledger_length = Gauge("pool_ledger_length", "Receipts in the ledger", registry=r)
        self.replay_seconds = Gauge("pool_replay_seconds", "Start-up verification and replay time", registry=r)
        self.windows = Counter("pool_windows_ingested", "Agent windows counted (de-duplicated)", registry=r)
        self.duplicate_windows = Counter("pool_windows_duplicate", "Agent windows already counted (resends)",
                                         registry=r)
        self.agents_live = Gauge("pool_agents_live", "Agents with an open stream", registry=r)
        self.leader = Gauge("pool_leader", "1 on the leader (and on a SQLite ledger), 0 on a standby",
                            registry=r)
        self.insecure = Gauge("pool_insecure_mode", "1 when serving plaintext with every caller an operator "
                              "([server] insecure = true)", registry=r)
        self.admission_wait = Histogram("pool_admission_wait_seconds", "Time from submission to admission",
                                        buckets=WAIT_BUCKETS_S, registry=r)
        for label in REFUSAL_LABELS:
            self.refusals.labels(label)
        for kind in SETTLEMENT_KINDS:
            self.settlements.labels(kind)

    def count(self, state: ClusterState, event: Event) -> None:
        """One committed event; `state` is one from the event on (a claim's hold never changes once admitted)."""
        if isinstance(event, ClaimAdmitted):
            self.admissions.inc()
            claim = state.claims.get(event.claim_id)   # its submission time never changes
            submitted = claim.submitted_ns if claim is not None else 0
            if submitted:
                self.admission_wait.observe(max(0, event.at_ns - submitted) / NS_PER_S)
        elif isinstance(event, ClaimRefused):
            self.refusals.labels(event.reason.name).inc()
        elif isinstance(event, Settled):
            self.settlements.labels(event.kind).inc()
            if event.actual_uj > state.claims[event.claim_id].hold_uj:
                self.overruns.inc()

    def watch_state(self, state: Callable[[], ClusterState], pending: Callable[[], dict[str, Reason]],
                    observed: Callable[[], Observed] | None = None) -> None:
        self.registry.register(_StateCollector(state, pending, observed))

    def watch_views(self, verdicts: Callable[[], tuple[ClaimVerdict, ...]], witness_lag: Callable[[], int | None]) -> None:
        self.registry.register(_ViewCollector(verdicts, witness_lag))

    def serve(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        start_http_server(int(port), addr=host or "127.0.0.1", registry=self.registry)


class _StateCollector(Collector):
    def __init__(self, state: Callable[[], ClusterState], pending: Callable[[], dict[str, Reason]],
                 observed: Callable[[], Observed] | None) -> None:
        self._state, self._pending, self._observed = state, pending, observed

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self._state()
        usage = GaugeMetricFamily("pool_tenant_usage_uj", "Tenant (subtree) usage in µJ", labels=["tenant"])
        guarantee = GaugeMetricFamily("pool_tenant_guarantee_uj", "Tenant guarantee in µJ", labels=["tenant"])
        borrowed = GaugeMetricFamily("pool_tenant_borrowed_uj", "Tenant (subtree) usage above its guarantee in µJ",
                                     labels=["tenant"])
        for name in state.tree.order if state.tree is not None else ():
            used, promised = state.usage[name].energy.total, state.tree.nodes[name].guarantee_uj
            usage.add_metric([name], used)
            guarantee.add_metric([name], promised)
            borrowed.add_metric([name], max(0, used - promised))
        pending = GaugeMetricFamily("pool_pending_claims", "Pending claims by the reason they wait",
                                    labels=["reason"])
        waiting = Tally(r.name for r in self._pending().values())
        for reason in sorted({*WAITING_REASONS, *waiting}):
            pending.add_metric([reason], waiting.get(reason, 0))
        # the longest wait in the queue now (0 with nothing pending); time is read here, at the edge
        now, oldest = time.time_ns(), 0
        for _, _, claim_id in state.pending:
            submitted = state.claims[claim_id].submitted_ns
            if submitted:
                oldest = max(oldest, now - submitted)
        wait = GaugeMetricFamily("pool_pending_oldest_wait_seconds", "How long the longest-waiting pending claim has waited")
        wait.add_metric([], oldest / NS_PER_S)
        cordoned = GaugeMetricFamily("pool_worker_cordoned", "1 for a worker an operator cordoned, else 0",
                                     labels=["worker"])
        for worker_id in state.worker_ids:
            cordoned.add_metric([worker_id], int(state.workers[worker_id].cordoned))
        yield from (usage, guarantee, borrowed, pending, wait, cordoned)
        if self._observed is not None:
            yield from _loss(self._observed(), state.worker_ids)


def _loss(observed: Observed, hosts: tuple[str, ...]) -> Iterator[CounterMetricFamily]:
    """What each host's agent reported as gaps, since the state was rebuilt
    (0 for every registered host and gap reason it did not report)."""
    unaccounted = CounterMetricFamily("pool_host_unaccounted_seconds",
                                      "Device seconds a host's agent reported as gaps (no figure), by why",
                                      labels=["host", "reason"])
    seen = observed.unaccounted_ns
    for host, reason in sorted({*((h, r.name) for h in hosts for r in GapReason), *seen}):
        unaccounted.add_metric([host, reason], seen.get((host, reason), 0) / 1e9)
    lost = CounterMetricFamily("pool_host_windows_lost",
                               "Measured windows a host's agent merged into spool-overflow gaps or replaced "
                               "by refused-window (GAP_REFUSED) gaps", labels=["host"])
    for host in sorted({*hosts, *observed.lost_windows}):
        lost.add_metric([host], observed.lost_windows.get(host, 0))
    # an agent's windows against its own history (windows/floors.py, OPERATIONS.md "Security")
    below = CounterMetricFamily("pool_host_windows_below_idle_floor",
                                "Windows in which claims occupied a device and it drew below half its own idle "
                                "floor: the host's agent disagrees with its own history", labels=["host"])
    for host in sorted({*hosts, *observed.floors.below}):
        below.add_metric([host], observed.floors.below.get(host, 0))
    floor = GaugeMetricFamily("pool_device_idle_floor_watts",
                              "The lowest mean power each device showed with no claim on it, once it has shown "
                              "enough idle windows to judge by", labels=["host", "device"])
    for (host, device), uw in sorted(observed.floors.judged().items()):
        floor.add_metric([host, device], uw / 1e6)
    yield from (unaccounted, lost, below, floor)


class _ViewCollector(Collector):
    """Figures the operations API computes on demand: idle verdicts, witness lag."""

    def __init__(self, verdicts: Callable[[], tuple[ClaimVerdict, ...]], witness_lag: Callable[[], int | None]) -> None:
        self._verdicts, self._witness_lag = verdicts, witness_lag

    def collect(self) -> Iterator[GaugeMetricFamily]:
        verdicts = GaugeMetricFamily("pool_idle_verdicts", "Open admitted claims by idle verdict (RULES §8)",
                                     labels=["verdict"])
        tally = Tally(v.verdict.name for v in self._verdicts())
        for verdict in IdleVerdict:
            if verdict is not IdleVerdict.IDLE_VERDICT_UNSPECIFIED:
                verdicts.add_metric([verdict.name], tally.get(verdict.name, 0))
        yield verdicts
        lag = self._witness_lag()
        if lag is not None:
            family = GaugeMetricFamily("pool_ledger_witness_lag", "Receipts beyond the last witnessed length")
            family.add_metric([], lag)
            yield family
