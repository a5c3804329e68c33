"""What the agents observed: device windows with their per-occupant shares.

A batch of windows from one host is recorded in the ledger as a `windows`
receipt (the evidence), and folded here into three things: the kernel's
`Metered` event (per-claim µJ, worst grade), the split rows `poolctl splits`
shows, and per-claim observations for idle verdicts. The rows and
observations are bounded projections, kept as plain tuples: the ledger keeps
everything.

The `windows` body is column by column, so that building, normalizing and
encoding a batch costs a few list operations rather than a map per window:

    {"worker": host,
     "device": [str], "seq": [int], "start_ns": [int], "end_ns": [int],
     "uj": [int | null], "grade": [grade name], "shares": [int],
     "occupant": [str], "share_uj": [int], "share_grade": [grade name]}

The first seven lists have one entry per window, in increasing seq; "shares"
is how many shares each window has, and those shares follow one another, in
window order, in the three share lists.

A batch with a gap in it (a window with no figure) also has two more
per-window columns, absent otherwise (and in bodies written before them):

     "gap": [GapReason name | null], "lost": [int]

"gap" names why each window has no figure (null for a window with one, and
for a gap from an agent that gave no reason); "lost" counts the measured
windows an agent merged into a spool-overflow gap. Gaps are folded into gap
records: `poolctl splits` reports each device's unaccounted time beside its
µJ, and the metrics count them per host.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator, Mapping
from itertools import chain, islice, repeat
from typing import Any, NamedTuple

from protos.energy import GapReason, Grade, worst
from scheduler.kernel import Claim, ClaimState, ClusterState, MeterDelta, Metered, Observation

WINDOWS = "windows"          # the receipt kind
CPU_PREFIX = "cpu:"          # CPU package devices are "cpu:<index>"
OBSERVATIONS_PER_CLAIM = 512  # windows kept per claim for idle verdicts
GRADES = Grade.__members__   # grade name -> Grade
GAP_NAMES = {int(r): r.name for r in GapReason}   # wire value -> name in the body
UNKNOWN_GAP = "Unknown"      # a gap whose agent gave no reason
_PER_WINDOW = 7              # Windows' first columns have an entry per window, the next three one per share
_SHARES = 10                 # after them, the optional per-window gap columns


class Windows(NamedTuple):
    """One host's batch, as the body's columns (grades by name)."""

    device: list[str]
    seq: list[int]
    start_ns: list[int]
    end_ns: list[int]
    uj: list[int | None]
    grade: list[str]
    shares: list[int]
    occupant: list[str]
    share_uj: list[int]
    share_grade: list[str]
    gap: list[str | None] | None = None   # per window, only in a batch with a gap in it
    lost: list[int] | None = None

    def window_of_shares(self) -> list[int]:
        """The index of each share's window."""
        return list(chain.from_iterable(map(repeat, range(len(self.shares)), self.shares)))

    def per_share(self, column: list) -> list:
        """A per-window column with each window's entry once for each of its
        shares: the column itself when every window has one share (a sole
        occupant's, the usual window)."""
        if len(self.occupant) == len(self.shares) and self.shares == [1] * len(self.shares):
            return column
        return list(map(column.__getitem__, self.window_of_shares()))

    def since(self, seq: int) -> Windows:
        """The windows above `seq` (seqs increase within a batch)."""
        first = bisect_right(self.seq, seq)
        if not first:
            return self
        skipped = sum(self.shares[:first])
        return type(self)(*(column[first:] for column in self[:_PER_WINDOW]),
                       *(column[skipped:] for column in self[_PER_WINDOW:_SHARES]),
                       *(None if column is None else column[first:] for column in self[_SHARES:]))

    def gaps(self) -> list[tuple[int, str, int]]:
        """(index, reason name, lost windows) of each window with no figure."""
        if None not in self.uj:
            return []
        reasons, lost = self.gap or repeat(None), self.lost or repeat(0)
        return [(i, reason or UNKNOWN_GAP, n) for i, (uj, reason, n) in enumerate(zip(self.uj, reasons, lost))
                if uj is None]


class WireWindows(Windows):
    """A batch's columns as read from its protobuf messages
    (convert.batch_columns): every item is of the type its field declares,
    text (the TEXT columns) or an integer within uint64, or None where a
    field may be unset; window_body takes such columns without looking at
    each item."""

    __slots__ = ()


TEXT = frozenset({"worker", "device", "grade", "occupant", "share_grade", "gap"})   # the body's text columns


class SplitRow(NamedTuple):
    tenant: str       # "" for the unallocated remainder or a claim no longer known
    claim_id: str
    worker: str
    device_id: str
    start_ns: int
    end_ns: int
    uj: int
    grade: Grade


class GapRecord(NamedTuple):
    worker: str
    device_id: str
    start_ns: int
    end_ns: int
    reason: str               # a GapReason name, or UNKNOWN_GAP
    lost_windows: int
    tenants: frozenset[str]   # the tenants whose claims occupied the device when it was counted
    seq: int                  # the receipt it came from


def windows_body(worker: str, windows: Windows) -> dict[str, Any]:
    body = {"worker": worker, **windows._asdict()}
    for optional in Windows._fields[_SHARES:]:
        if body[optional] is None:
            del body[optional]
    return body


def windows_from_body(body: Mapping[str, Any]) -> tuple[str, Windows]:
    return body["worker"], Windows(*(body[name] for name in Windows._fields[:_SHARES]),
                                   *(body.get(name) for name in Windows._fields[_SHARES:]))


def occupants(state: ClusterState, host: str) -> dict[str, dict[str, int]]:
    """Admitted claims on a host by what they occupy, with their weights: each
    GPU by device id (milli-devices), and under CPU_PREFIX every claim with
    reserved CPU (cpu_millis; it shares each CPU package of the host). The
    one home of a host's occupancy: what is sent to agents, what windows are
    checked against (evidence.py) and who observes a window (below)."""
    return held_by(state.claims, state.loads[host].active if host in state.loads else ())


def held_by(claims: Mapping[str, Claim], active: Iterable[str]) -> dict[str, dict[str, int]]:
    """occupants, of the admitted claims `active` (ids in `claims`): a recorded
    occupancy version keeps just these two, and its weights are made from them
    only when a window names it (occupancies.py)."""
    by_device: dict[str, dict[str, int]] = {}
    for claim_id in active:
        claim = claims[claim_id]
        for share in claim.devices:
            by_device.setdefault(share.device_id, {})[claim_id] = share.mdev
        if claim.spec.resources.cpu_millis:
            by_device.setdefault(CPU_PREFIX, {})[claim_id] = claim.spec.resources.cpu_millis
    return by_device


class Holders:
    """`occupants(state, host)`, kept per host while the host's open claims
    are the same: the same `WorkerLoad.active` tuple (a state's loads are
    immutable, and an admitted claim's devices and CPU are fixed until it is
    settled, which makes a new tuple). A host with thousands of open claims
    otherwise walks them all for every batch its agent sends. The answers are
    shared: read them, never change them. tests/service/test_engine.py checks
    them against `occupants` through random submissions, releases and windows."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[tuple[str, ...], dict[str, dict[str, int]]]] = {}

    def __call__(self, state: ClusterState, host: str) -> dict[str, dict[str, int]]:
        load = state.loads.get(host)
        active = load.active if load is not None else ()
        known = self._known.get(host)
        if known is not None and known[0] is active:
            return known[1]
        held = occupants(state, host)
        self._known[host] = (active, held)
        return held


class Observed:
    """The rows and observations carry the seq of the receipt they came from,
    so that reads can serve only what is durable (committed.py)."""

    def __init__(self, retention: int) -> None:
        self.holders = Holders()   # who occupies what on each host, for every batch folded and checked
        # split rows as plain tuples in SplitRow's order, grades by name, then the receipt's seq
        self.rows: deque[tuple] = deque(maxlen=retention)
        self.rows_dropped = 0   # rows the retention has pushed out: rows[i] is row number rows_dropped + i
        # per claim: (device, start_ns, end_ns, uj, grade name, receipt seq) of its recent windows
        self._by_claim: dict[str, deque[tuple]] = defaultdict(lambda: deque(maxlen=OBSERVATIONS_PER_CLAIM))
        self.gap_records: deque[GapRecord] = deque(maxlen=retention)
        self.gaps_dropped = 0   # likewise for the gap records
        # since the state was rebuilt: (worker, reason) -> gap ns, worker -> measured windows lost
        self.unaccounted_ns: dict[tuple[str, str], int] = defaultdict(int)
        self.lost_windows: dict[str, int] = defaultdict(int)
        # per host, per device: the end_ns of its last counted window (evidence.py's "starts no
        # earlier than the previous window ended"); rebuilt by replay, kept in checkpoints
        self.ends: dict[str, dict[str, int]] = {}

    def fold(self, state: ClusterState, worker: str, windows: Windows, seq: int) -> Metered | None:
        """Record a batch, from the receipt `seq`; the Metered event it means for
        the kernel (None when every window was already counted)."""
        fresh = windows.since(state.acked.get(worker, 0))
        if not fresh.seq:
            return None
        claims = {o: state.claims.get(o) for o in set(fresh.occupant)}
        tenant = {o: c.tenant if c else "" for o, c in claims.items()}
        self.rows_dropped += max(0, len(self.rows) + len(fresh.occupant) - (self.rows.maxlen or 0))
        self.rows.extend(zip(map(tenant.__getitem__, fresh.occupant), fresh.occupant, repeat(worker),
                             *map(fresh.per_share, (fresh.device, fresh.start_ns, fresh.end_ns)),
                             fresh.share_uj, fresh.share_grade, repeat(seq)))
        on_device = self.holders(state, worker)
        self._observe(on_device, fresh, seq)
        self._gaps(state, worker, on_device, fresh, seq)
        self.ends.setdefault(worker, {}).update(zip(fresh.device, fresh.end_ns))
        admitted = {o for o, c in claims.items() if c is not None and c.state is ClaimState.ADMITTED}
        return Metered(worker, fresh.seq[-1], _deltas(admitted, fresh))

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
                self._by_claim[claim_id].append((device, w.start_ns[i], w.end_ns[i],
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
        relevant = [o for o in history
                    if o[5] < below and (o[0] in gpus if gpus else o[0].startswith(CPU_PREFIX))]
        if not relevant:
            return None
        end = max(o[2] for o in relevant)
        span = [o for o in relevant if o[2] > end - window_ns] if window_ns else relevant
        start = min(o[1] for o in span)
        total = None if any(o[3] is None for o in span) else sum(o[3] for o in span)
        return Observation(start, end, total, worst(GRADES[o[4]] for o in span))

    def splits(self, tenants: frozenset[str] | None, since_ns: int, device_id: str, below: int, start: int = 0
               ) -> Iterator[tuple[int, SplitRow]]:
        """The matching rows from receipts below seq `below`, from row number
        `start` on, each with its number."""
        first = max(0, start - self.rows_dropped)
        return ((self.rows_dropped + i, SplitRow(*r[:7], GRADES[r[7]]))
                for i, r in enumerate(islice(self.rows, first, None), first)
                if r[8] < below and r[5] > since_ns and (not device_id or r[3] == device_id)
                and (tenants is None or r[0] in tenants))

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


def _deltas(admitted: set[str], w: Windows) -> tuple[MeterDelta, ...]:
    """Per admitted claim among the occupants: the sum of its shares, graded by the worst."""
    if not admitted:
        return ()
    deltas: dict[str, tuple[int, list[str]]] = {}
    for occupant, uj, grade in zip(w.occupant, w.share_uj, w.share_grade):
        if occupant in admitted:
            total, grades = deltas.setdefault(occupant, (0, []))
            grades.append(GRADES[grade])
            deltas[occupant] = (total + uj, grades)
    return tuple(MeterDelta(c, uj, worst(g)) for c, (uj, g) in sorted(deltas.items()))
