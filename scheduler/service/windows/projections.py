"""What the agents observed, as bounded projections of the `windows`
receipts: the split rows `poolctl splits` shows, the gap records beside them,
and each claim's recent windows for its idle verdict. Each is a named record
carrying the seq of the receipt it came from, so that a read serves only what
is durable (`below(length)`: committed.py). The ledger keeps everything; these
keep the last `retention` rows and gaps, and OBSERVATIONS_PER_CLAIM windows a
claim.

A `windows` receipt's new windows (above the host's counted seq) are fed
here by the engine beside the service's fold (state.py), which takes from
`metered` the kernel's event (per-claim µJ, worst grade) the batch means.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Iterator, Mapping
from itertools import islice, repeat
from typing import NamedTuple

from protos.energy import Grade, sum_graded
from scheduler.kernel import ClaimState, ClusterState, MeterDelta, Metered, Observation, counted
from scheduler.service.windows.batch import CPU_PREFIX, GRADES, Windows
from scheduler.service.windows.floors import Floors
from scheduler.service.windows.occupancy import Holders

OBSERVATIONS_PER_CLAIM = 512  # windows kept per claim for idle verdicts


class SplitRow(NamedTuple):
    tenant: str       # "" for the unallocated remainder or a claim no longer known
    claim_id: str
    worker: str
    device_id: str
    start_ns: int
    end_ns: int
    uj: int
    grade: str        # a Grade name (GRADES)
    seq: int          # the receipt it came from


class ClaimWindow(NamedTuple):
    """One window as a claim on its device saw it: its own share's µJ and
    grade (no figure if the window has none), else the window's grade."""

    device_id: str
    start_ns: int
    end_ns: int
    uj: int | None
    grade: str        # a Grade name
    seq: int          # the receipt it came from


class GapRecord(NamedTuple):
    worker: str
    device_id: str
    start_ns: int
    end_ns: int
    reason: str               # a GapReason name, or UNKNOWN_GAP
    lost_windows: int
    tenants: frozenset[str]   # the tenants whose claims occupied the device when it was counted
    seq: int                  # the receipt it came from


class Observed:
    """The rows and observations carry the seq of the receipt they came from,
    so that reads can serve only what is durable (committed.py)."""

    def __init__(self, retention: int) -> None:
        self.holders = Holders()   # who occupies what on each host, for every batch folded and checked
        self.floors = Floors()     # each device's idle floor, and the windows below it (noticing, floors.py)
        # kept as plain tuples in SplitRow's field order, made records when read: a record made
        # for every share written cost the fold twice what the tuple does (docs/BENCHMARKS.md)
        self.rows: deque[tuple] = deque(maxlen=retention)
        self.rows_dropped = 0   # rows the retention has pushed out: rows[i] is row number rows_dropped + i
        # per claim: its recent windows
        self._by_claim: dict[str, deque[ClaimWindow]] = defaultdict(lambda: deque(maxlen=OBSERVATIONS_PER_CLAIM))
        self.gap_records: deque[GapRecord] = deque(maxlen=retention)
        self.gaps_dropped = 0   # likewise for the gap records
        # since the state was rebuilt: (worker, reason) -> gap ns, worker -> measured windows lost
        self.unaccounted_ns: dict[tuple[str, str], int] = defaultdict(int)
        self.lost_windows: dict[str, int] = defaultdict(int)

    def fold(self, state: ClusterState, worker: str, windows: Windows, seq: int) -> Metered | None:
        """`feed` the batch's new windows (above the host's counted seq in
        `state`), and the Metered event they mean for the kernel (None when
        every window was already counted): what the service's fold does
        with a `windows` receipt (state.py), for tests and benches."""
        fresh = windows.since(counted(state, worker))   # a window is counted once
        if not fresh.seq:
            return None
        self.feed(state, worker, fresh, seq)
        return metered(state, worker, fresh)

    def feed(self, state: ClusterState, worker: str, fresh: Windows, seq: int) -> None:
        """Record a batch's new windows, from the receipt `seq`; `state` is the
        kernel's state they were counted on."""
        claims = {o: state.claims.get(o) for o in set(fresh.occupant)}
        tenant = {o: c.tenant if c else "" for o, c in claims.items()}
        self.rows_dropped += max(0, len(self.rows) + len(fresh.occupant) - (self.rows.maxlen or 0))
        self.rows.extend(zip(map(tenant.__getitem__, fresh.occupant), fresh.occupant, repeat(worker),
                             *map(fresh.per_share, (fresh.device, fresh.start_ns, fresh.end_ns)),
                             fresh.share_uj, fresh.share_grade, repeat(seq)))
        on_device = self.holders(state, worker)
        self._observe(on_device, fresh, seq)
        self._gaps(state, worker, on_device, fresh, seq)
        self.floors.feed(worker, fresh)

    def _observe(self, on_device: Mapping[str, Mapping[str, int]], w: Windows, seq: int) -> None:
        """Each claim on a window's device sees the window: its own share's µJ
        and grade (none if the window has no figure), else the window's grade."""
        if not any((CPU_PREFIX if d.startswith(CPU_PREFIX) else d) in on_device for d in set(w.device)):
            return   # no claim occupies any of the batch's devices
        mine = {(i, o): (uj, g) for i, o, uj, g in zip(w.window_of_shares(), w.occupant, w.share_uj, w.share_grade)}
        for i, device in enumerate(w.device):
            claim_ids = on_device.get(CPU_PREFIX if device.startswith(CPU_PREFIX) else device, ())
            for claim_id in claim_ids:
                uj, grade = mine.get((i, claim_id), (None, w.grade[i]))
                self._by_claim[claim_id].append(ClaimWindow(device, w.start_ns[i], w.end_ns[i],
                                                            uj if w.uj[i] is not None else None, grade, seq))

    def _gaps(self, state: ClusterState, worker: str, on_device: Mapping[str, list[str]], w: Windows,
              seq: int) -> None:
        for i, reason, lost in w.gaps():
            device = w.device[i]
            holders = on_device.get(CPU_PREFIX if device.startswith(CPU_PREFIX) else device, ())
            tenants = frozenset(state.claims[c].tenant for c in holders)
            self.gaps_dropped += len(self.gap_records) == self.gap_records.maxlen
            self.gap_records.append(GapRecord(worker, device, w.start_ns[i], w.end_ns[i], reason, lost, tenants,
                                              seq))
            self.unaccounted_ns[worker, reason] += w.end_ns[i] - w.start_ns[i]
            self.lost_windows[worker] += lost

    def forget(self, claim_id: str) -> None:
        self._by_claim.pop(claim_id, None)

    def observation(self, state: ClusterState, claim_id: str, window_ns: int, below: int) -> Observation | None:
        """The claim's energy over the most recent `window_ns` (at least), on the
        devices its idle threshold is judged by: its GPUs, else CPU packages;
        from receipts below seq `below` only. No figure if any window in the
        span has none."""
        claim = state.claims.get(claim_id)
        history = self._by_claim.get(claim_id)
        if claim is None or not history:
            return None
        gpus = {d.device_id for d in claim.devices}
        relevant = [o for o in below_seq(history, below)
                    if (o.device_id in gpus if gpus else o.device_id.startswith(CPU_PREFIX))]
        if not relevant:
            return None
        end = max(o.end_ns for o in relevant)
        span = [o for o in relevant if o.end_ns > end - window_ns] if window_ns else relevant
        start = min(o.start_ns for o in span)
        total, grade = sum_graded((o.uj or 0, GRADES[o.grade]) for o in span)
        return Observation(start, end, None if any(o.uj is None for o in span) else total, grade)

    def splits(self, tenants: frozenset[str] | None, since_ns: int, device_id: str, below: int, start: int = 0
               ) -> Iterator[tuple[int, SplitRow]]:
        """The matching rows from receipts below seq `below`, from row number
        `start` on, each with its number."""
        first = max(0, start - self.rows_dropped)
        rows = map(SplitRow._make, islice(self.rows, first, None))
        return ((self.rows_dropped + i, r) for i, r in enumerate(rows, first)
                if r.seq < below and r.end_ns > since_ns and (not device_id or r.device_id == device_id)
                and (tenants is None or r.tenant in tenants))

    def gaps(self, tenants: frozenset[str] | None, since_ns: int, device_id: str, below: int) -> list[GapRecord]:
        """The gap records the same selection as `splits` covers: from receipts
        below seq `below`, on the tenants' devices (those their claims
        occupied at the time)."""
        return [g for _, g in self.numbered_gaps(tenants, since_ns, device_id, below)]

    def numbered_gaps(self, tenants: frozenset[str] | None, since_ns: int, device_id: str, below: int,
                      start: int = 0) -> Iterator[tuple[int, GapRecord]]:
        """`gaps` from gap number `start` on, each with its number."""
        first = max(0, start - self.gaps_dropped)
        return ((self.gaps_dropped + i, g) for i, g in enumerate(islice(self.gap_records, first, None), first)
                if g.seq < below and g.end_ns > since_ns and (not device_id or g.device_id == device_id)
                and (tenants is None or not tenants.isdisjoint(g.tenants)))


def below_seq(records: Iterable[ClaimWindow], below: int) -> Iterator[ClaimWindow]:
    """The records from receipts below seq `below`: what a read at the
    committed length may see."""
    return (r for r in records if r.seq < below)


def metered(state: ClusterState, worker: str, fresh: Windows) -> Metered:
    """The kernel's event for a host's new windows: per admitted claim among
    the occupants, the sum of its shares, graded by the worst."""
    admitted = {o for o in set(fresh.occupant)
                if (c := state.claims.get(o)) is not None and c.state is ClaimState.ADMITTED}
    return Metered(worker, fresh.seq[-1], _deltas(admitted, fresh))


def _deltas(admitted: set[str], w: Windows) -> tuple[MeterDelta, ...]:
    """Per admitted claim among the occupants: the sum of its shares, graded by the worst."""
    if not admitted:
        return ()
    shares: dict[str, list[tuple[int, Grade]]] = {}
    for occupant, uj, grade in zip(w.occupant, w.share_uj, w.share_grade):
        if occupant in admitted:
            shares.setdefault(occupant, []).append((uj, GRADES[grade]))
    return tuple(MeterDelta(c, *sum_graded(parts)) for c, parts in sorted(shares.items()))
