"""What the agents observed: device windows with their per-occupant shares.

A batch of windows from one host is recorded in the ledger as a `windows`
receipt (the evidence), and folded here into three things: the kernel's
`Metered` event (per-claim µJ, worst grade), the split rows `poolctl splits`
shows, and per-claim observations for idle verdicts. The rows and
observations are bounded projections: the ledger keeps everything.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from protos.energy import Grade, worst
from scheduler.kernel import ClaimState, ClusterState, MeterDelta, Metered, Observation

WINDOWS = "windows"          # the receipt kind
CPU_PREFIX = "cpu:"          # CPU package devices are "cpu:<index>"
OBSERVATIONS_PER_CLAIM = 512  # windows kept per claim for idle verdicts


@dataclass(frozen=True, slots=True)
class WindowShare:
    occupant: str
    uj: int
    grade: Grade


@dataclass(frozen=True, slots=True)
class DeviceWindow:
    device_id: str
    seq: int
    start_ns: int
    end_ns: int
    uj: int | None
    grade: Grade
    shares: tuple[WindowShare, ...]


@dataclass(frozen=True, slots=True)
class SplitRow:
    tenant: str       # "" for the unallocated remainder or a claim no longer known
    claim_id: str
    worker: str
    device_id: str
    start_ns: int
    end_ns: int
    uj: int
    grade: Grade


def windows_body(worker: str, windows: Iterable[DeviceWindow]) -> dict[str, Any]:
    return {"worker": worker, "windows": [
        {"device": w.device_id, "seq": w.seq, "start_ns": w.start_ns, "end_ns": w.end_ns, "uj": w.uj,
         "grade": w.grade.name, "shares": [[s.occupant, s.uj, s.grade.name] for s in w.shares]}
        for w in windows]}


def windows_from_body(body: Mapping[str, Any]) -> tuple[str, tuple[DeviceWindow, ...]]:
    return body["worker"], tuple(
        DeviceWindow(w["device"], w["seq"], w["start_ns"], w["end_ns"], w["uj"], Grade[w["grade"]],
                     tuple(WindowShare(o, uj, Grade[g]) for o, uj, g in w["shares"]))
        for w in body["windows"])


def occupants(state: ClusterState, worker: str) -> dict[str, list[str]]:
    """Admitted claims by the device they occupy on a host: GPU holders by
    device id, and under CPU_PREFIX every claim with reserved CPU (it shares
    each CPU package of the host)."""
    by_device: dict[str, list[str]] = defaultdict(list)
    for claim_id in (state.loads[worker].active if worker in state.loads else ()):
        claim = state.claims[claim_id]
        for share in claim.devices:
            by_device[share.device_id].append(claim_id)
        if claim.spec.resources.cpu_millis:
            by_device[CPU_PREFIX].append(claim_id)
    return by_device


class Observed:
    def __init__(self, retention: int) -> None:
        self.rows: deque[SplitRow] = deque(maxlen=retention)
        self._by_claim: dict[str, deque[tuple[str, Observation]]] = defaultdict(
            lambda: deque(maxlen=OBSERVATIONS_PER_CLAIM))

    def fold(self, state: ClusterState, worker: str, windows: tuple[DeviceWindow, ...]) -> Metered | None:
        """Record a batch; the Metered event it means for the kernel (None when
        every window was already counted)."""
        fresh = [w for w in windows if w.seq > state.acked.get(worker, 0)]
        deltas: dict[str, tuple[int, list[Grade]]] = {}
        on_device = occupants(state, worker) if fresh else {}
        for w in fresh:
            device = CPU_PREFIX if w.device_id.startswith(CPU_PREFIX) else w.device_id
            self._observe(on_device.get(device, ()), w)
            for share in w.shares:
                claim = state.claims.get(share.occupant)
                self.rows.append(SplitRow(claim.tenant if claim else "", share.occupant, worker, w.device_id,
                                          w.start_ns, w.end_ns, share.uj, share.grade))
                if claim is not None and claim.state is ClaimState.ADMITTED:
                    uj, grades = deltas.setdefault(share.occupant, (0, []))
                    grades.append(share.grade)
                    deltas[share.occupant] = (uj + share.uj, grades)
        if not fresh:
            return None
        return Metered(worker, max(w.seq for w in fresh),
                       tuple(MeterDelta(c, uj, worst(g)) for c, (uj, g) in sorted(deltas.items())))

    def _observe(self, claim_ids: Iterable[str], w: DeviceWindow) -> None:
        shares = {s.occupant: s for s in w.shares}
        for claim_id in claim_ids:
            share = shares.get(claim_id)
            uj = share.uj if share is not None and w.uj is not None else None
            grade = share.grade if share is not None else w.grade
            self._by_claim[claim_id].append((w.device_id, Observation(w.start_ns, w.end_ns, uj, grade)))

    def forget(self, claim_id: str) -> None:
        self._by_claim.pop(claim_id, None)

    def observation(self, state: ClusterState, claim_id: str, window_ns: int) -> Observation | None:
        """The claim's energy over the most recent `window_ns` (at least), on the
        devices its idle threshold is judged by: its GPUs, else CPU packages.
        No figure if any window in the span has none."""
        claim = state.claims.get(claim_id)
        history = self._by_claim.get(claim_id)
        if claim is None or not history:
            return None
        gpus = {d.device_id for d in claim.devices}
        relevant = [o for device, o in history if (device in gpus if gpus else device.startswith(CPU_PREFIX))]
        if not relevant:
            return None
        end = max(o.end_ns for o in relevant)
        span = [o for o in relevant if o.end_ns > end - window_ns] if window_ns else relevant
        start = min(o.start_ns for o in span)
        total = None if any(o.uj is None for o in span) else sum(o.uj for o in span)
        return Observation(start, end, total, worst(o.grade for o in span))

    def splits(self, tenants: set[str] | None, since_ns: int, device_id: str) -> list[SplitRow]:
        return [r for r in self.rows
                if r.end_ns > since_ns and (not device_id or r.device_id == device_id)
                and (tenants is None or r.tenant in tenants)]
