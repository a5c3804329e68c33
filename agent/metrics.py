"""The agent's Prometheus metrics (served on /metrics when `metrics.listen` is set).

Counters are cumulative µJ as the agent measured them, labelled with the
grade they carry, so a dashboard can always tell a shunt from a guess.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from agent.windows import Window
from protos.energy import NS_PER_S, GapReason


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = r = registry or CollectorRegistry()
        self.device_uj = Counter("pool_agent_device_energy_uj", "Energy measured per device (µJ)",
                                 ["device", "grade"], registry=r)
        self.occupant_uj = Counter("pool_agent_occupant_energy_uj", "Energy split to each occupant (µJ)",
                                   ["device", "occupant", "grade"], registry=r)
        self.windows = Counter("pool_agent_windows", "Windows closed per device", ["device"], registry=r)
        self.gaps = Counter("pool_agent_gap_windows", "Windows with no figure (a gap), per device",
                            ["device"], registry=r)
        self.meter = Gauge("pool_agent_meter_info", "The meter chosen per device (value 1)",
                           ["device", "meter", "grade"], registry=r)
        self.window_lag = Gauge("pool_agent_window_lag_seconds",
                                "Age of the oldest window the scheduler has not acknowledged (0: none)",
                                registry=r)
        self.buffered = Gauge("pool_agent_buffered_windows", "Windows held until the scheduler acknowledges",
                              registry=r)
        self.windows_lost = Counter("pool_agent_windows_lost",
                                    "Measured windows whose figure never reaches the scheduler (merged into a "
                                    "spool-overflow gap, or refused and replaced by a GAP_REFUSED gap)",
                                    ["device"], registry=r)
        self.windows_refused = Counter("pool_agent_windows_refused",
                                       "Windows the scheduler refused on stream.refusals_before_gap consecutive "
                                       "sessions, replaced in the spool by a GAP_REFUSED gap", ["device"], registry=r)
        self.unaccounted = Counter("pool_agent_unaccounted_seconds",
                                   "Device seconds that reach the scheduler as a gap, not as a figure, by why",
                                   ["device", "reason"], registry=r)
        self.reconnects = Counter("pool_agent_reconnects", "Stream (re)connection attempts", registry=r)
        self._children: dict[tuple, object] = {}

    def _child(self, metric, *labels):
        """metric.labels(...) memoised: the lookup is most of a window's cost."""
        key = (metric._name, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def window(self, w: Window) -> None:
        self._child(self.windows, w.device_id).inc()
        gaps = self._child(self.gaps, w.device_id)   # made on the first window, so a device shows 0 gaps, not none
        if w.uj is None:
            gaps.inc()
            reason = (w.reason or GapReason.MeterError).name
            self._child(self.unaccounted, w.device_id, reason).inc((w.end_ns - w.start_ns) / NS_PER_S)
            return
        self._child(self.device_uj, w.device_id, w.grade.name).inc(w.uj)
        for share in w.shares:
            self._child(self.occupant_uj, w.device_id, share.occupant, share.grade.name).inc(share.uj)

    def lost(self, device: str, windows: int, ns: int, reason: GapReason = GapReason.SpoolOverflow) -> None:
        """Measured windows whose figures become a gap in the spool (merged away by an
        overflow, or refused), and the seconds they covered."""
        self._child(self.windows_lost, device).inc(windows)
        self._child(self.unaccounted, device, reason.name).inc(ns / NS_PER_S)

    def refused(self, device: str, ns: int) -> None:
        """A measured window the scheduler kept refusing, replaced by a GAP_REFUSED gap."""
        self._child(self.windows_refused, device).inc()
        self.lost(device, 1, ns, GapReason.Refused)

    def serve(self, listen: str) -> None:
        host, _, port = listen.rpartition(":")
        start_http_server(int(port), addr=host or "0.0.0.0", registry=self.registry)
