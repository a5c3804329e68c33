"""Who occupies what: the one home of a host's occupancy (RULES §2), and the
occupancy versions the scheduler issued to each host, and when each
was superseded, so that a window's shares can be checked against the
occupancy its agent split it by (evidence.py).

A version is the receipt that last changed a host's occupancy
(`ServiceState.occupancy_seq`). Live, the engine records each host's last version
of a commit (the only one that can be sent: agents hear of a commit once it
is durable, whole); replay records every version as it folds its receipt, so
a restart knows every one that may have been sent. A version is superseded
when the scheduler first *sends* a newer one to the host's agent.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from protos.energy import MDEV_PER_DEVICE, with_unallocated
from scheduler.kernel import Claim, ClusterState, Worker
from scheduler.kernel.fast.edit import OPEN
from scheduler.kernel.fast.pmap import PMap
from scheduler.kernel.fast.sortedseq import Shared
from scheduler.service.windows.batch import CPU_PREFIX

# occupancy versions remembered per host: a busy host changes occupancy with every admission
# and release, and an agent's spooled windows may name a version from before a failover
HISTORY = 4096


def occupants(state: ClusterState, host: str) -> dict[str, dict[str, int]]:
    """Admitted claims on a host by what they occupy, with their weights: each
    GPU by device id (milli-devices), and under CPU_PREFIX every claim with
    reserved CPU (cpu_millis; it shares each CPU package of the host). The
    one home of a host's occupancy: what is sent to agents, what windows are
    checked against (evidence.py) and who observes a window (projections.py)."""
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
    are the same: the same `WorkerLoad.active` (a state's loads are
    immutable, and an admitted claim's devices and CPU are fixed until it is
    settled, which makes a new one). A host with thousands of open claims
    otherwise walks them all for every batch its agent sends. When they
    changed and are many (a kernel/fast/sortedseq.Shared, never changed in
    place), the answer is the last one with the claims that left taken out
    and those that came put in (Shared.difference reads only the blocks that
    changed), so one admission on a host holding 50,000 claims does not walk
    them all again. Each device's holders are a persistent map
    (kernel/fast/pmap.PMap): a change copies one path of it, not the
    device's every holder (a host's CPU packages are held by every claim
    with reserved CPU), and the answers handed out stay as they were. The
    answers are shared: read them, never change them (a PMap cannot be).
    tests/service/test_holders.py and test_engine.py check them against
    `occupants` through random submissions, releases and windows."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[Iterable[str], dict[str, PMap]]] = {}

    def __call__(self, state: ClusterState, host: str) -> dict[str, PMap]:
        load = state.loads.get(host)
        active = load.active if load is not None else ()
        known = self._known.get(host)
        if known is not None and known[0] is active:
            return known[1]
        if known is not None and type(active) is Shared and type(known[0]) is Shared:
            held = _moved(known[1], *known[0].difference(active), state.claims)
        else:
            held = {key: PMap(holders) for key, holders in occupants(state, host).items()}
        self._known[host] = (active, held)
        return held


_NONE = PMap()


def _moved(held: dict[str, PMap], left: Iterable[str], came: Iterable[str],
           claims: Mapping[str, Claim]) -> dict[str, PMap]:
    """`held` (held_by of some claims, as PMaps, unchanged) with the claims
    `left` taken out and those that `came` put in, as held_by of the claims
    now open would be: a path of each map copied per claim, whatever the
    map holds. Never in place, even under an edit batch (the engine folds
    a commit's receipts in one): every answer handed out stays as it was."""
    out = dict(held)
    token = OPEN.set(None)
    try:
        for claim_id in left:
            for key in [k for k, holders in out.items() if claim_id in holders]:
                out[key] = out[key].delete(claim_id)
        for claim_id in came:
            claim = claims[claim_id]
            for share in claim.devices:
                out[share.device_id] = out.get(share.device_id, _NONE).set(claim_id, share.mdev)
            if claim.spec.resources.cpu_millis:
                out[CPU_PREFIX] = out.get(CPU_PREFIX, _NONE).set(claim_id, claim.spec.resources.cpu_millis)
    finally:
        OPEN.reset(token)
    return {key: holders for key, holders in out.items() if holders}


def capacities(worker: Worker) -> dict[str, int]:
    """Each occupied thing's capacity: a GPU's 1000 milli-devices, the host's cpu_millis."""
    return {**{d.device_id: MDEV_PER_DEVICE for d in worker.devices}, CPU_PREFIX: worker.cpu_millis}


@dataclass(slots=True)
class Issued:
    """One occupancy version of a host: the split weights of each GPU and of
    its CPU packages (CPU_PREFIX), `unallocated` included; and when the
    scheduler first sent a newer version (None: not yet)."""

    version: int
    weights: Mapping[str, dict[str, int]]
    superseded_ns: int | None = None


def issued(state: ClusterState, host: str, version: int,
           holders: Callable[[ClusterState, str], Mapping[str, Mapping[str, int]]] = occupants) -> Issued:
    """`version` as the host's state makes it now (`holders`: occupants, or a
    cache of it, Holders)."""
    return Issued(version, weights(state.workers[host], holders(state, host)))


def weights(worker: Worker, held: Mapping[str, Mapping[str, int]]) -> Weights:
    """The split weights of each thing a host's claims occupy, `unallocated` included."""
    return Weights(capacities(worker), held)


class Weights(Mapping):
    """weights(): each thing's made when first read, and kept. A batch of GPU
    windows does not make its host's CPU packages' (every claim with
    reserved CPU: 25,000 entries on a busy host)."""

    __slots__ = ("_capacities", "_held", "_made")

    def __init__(self, capacities: dict[str, int], held: Mapping[str, Mapping[str, int]]) -> None:
        self._capacities, self._held = capacities, held
        self._made: dict[str, dict[str, int]] = {}

    def __getitem__(self, key: str) -> dict[str, int]:
        made = self._made.get(key)
        if made is None:
            made = self._made[key] = _weights(self._capacities[key], self._held.get(key, {}))
        return made

    def __contains__(self, key: object) -> bool:
        return key in self._capacities

    def __iter__(self) -> Iterator[str]:
        return iter(self._capacities)

    def __len__(self) -> int:
        return len(self._capacities)


@dataclass(slots=True)
class Recorded:
    """A version as recorded: what its weights are made of, all immutable and
    shared with the state it was taken from (the worker, its sorted active
    claim ids, the claims map), so recording one costs the same whatever the
    host holds. The weights are made when a window first names it."""

    version: int
    worker: Worker
    active: tuple[str, ...]
    claims: Mapping[str, Claim]
    superseded_ns: int | None = None
    _weights: Weights | None = None

    @classmethod
    def of(cls, state: ClusterState, host: str, version: int) -> Recorded:
        load = state.loads.get(host)
        return cls(version, state.workers[host], load.active if load is not None else (), state.claims)

    def issued(self) -> Issued:
        if self._weights is None:
            self._weights = weights(self.worker, held_by(self.claims, self.active))
        return Issued(self.version, self._weights, self.superseded_ns)


def _weights(capacity: int, held: Mapping[str, int]) -> dict[str, int]:
    """with_unallocated, also for a host re-registered below what its claims hold
    (then there is no remainder, and the agent splits by the holders alone).
    `held`: a dict, or a PMap (Holders), merged leaf by leaf."""
    held = held.to_dict() if type(held) is PMap else held
    return with_unallocated(max(capacity, sum(held.values())), held)


class Occupancies:
    """The occupancy versions recorded for each host, the last HISTORY of them."""

    def __init__(self, holders: Callable[[ClusterState, str], Mapping[str, Mapping[str, int]]] = occupants) -> None:
        self._by_host: dict[str, deque[Recorded]] = {}
        self._holders = holders   # occupants, or a cache of it (Holders), for the current version
        # each host's current weights, kept while its worker and its holders are the same objects
        self._current: dict[str, tuple[Worker, Mapping[str, Mapping[str, int]], Weights]] = {}

    def record(self, state: ClusterState, hosts: Iterable[str], version: int) -> None:
        """`hosts` changed occupancy at receipt `version` (state: right after it)."""
        for host in hosts:
            if host in state.workers:
                self._by_host.setdefault(host, deque(maxlen=HISTORY)).append(Recorded.of(state, host, version))

    def seed(self, state: ClusterState, versions: Mapping[str, int]) -> None:
        """After a checkpoint: each host's version in force."""
        for host, version in versions.items():
            self.record(state, (host,), version)

    def versions(self, host: str) -> list[int]:
        """The versions remembered for a host, oldest first."""
        return [entry.version for entry in self._by_host.get(host, ())]

    def sent(self, host: str, version: int, now_ns: int) -> None:
        """`version` went out to the host's agent: every older one is superseded now.
        Versions are recorded in increasing order and each send supersedes all
        before it, so the superseded ones are the oldest: walk back from the
        newest and stop at the first already superseded."""
        for entry in reversed(self._by_host.get(host, ())):
            if entry.version >= version:
                continue
            if entry.superseded_ns is not None:
                break
            entry.superseded_ns = now_ns

    def find(self, state: ClusterState, host: str, version: int, current: int, opened_ns: int) -> Issued | None:
        """What the scheduler sent as `version` (current: the host's version now)."""
        if version == current:   # from the state itself: a re-registration may have changed it
            worker, held = state.workers[host], self._holders(state, host)
            kept = self._current.get(host)
            if kept is None or kept[0] is not worker or kept[1] is not held:
                self._current[host] = kept = (worker, held, weights(worker, held))
            return Issued(version, kept[2])
        if version == 0:
            return Issued(0, {}, opened_ns)
        return next((e.issued() for e in self._by_host.get(host, ()) if e.version == version), None)
