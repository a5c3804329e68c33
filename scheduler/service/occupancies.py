"""The occupancy versions the scheduler issued to each host, and when each
was superseded, so that a window's shares can be checked against the
occupancy its agent split it by (evidence.py).

A version is the receipt that last changed a host's occupancy
(`Engine.occupancy_seq`); the engine records each one as it folds that
receipt, live and at replay, so a restart knows them too. A version is
superseded when the scheduler first *sends* a newer one to the host's agent.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from protos.energy import MDEV_PER_DEVICE, with_unallocated
from scheduler.kernel import ClusterState
from scheduler.service.observed import CPU_PREFIX, occupants

# occupancy versions remembered per host: a busy host changes occupancy with every admission
# and release, and an agent's spooled windows may name a version from before a failover
HISTORY = 4096


def capacities(state: ClusterState, host: str) -> dict[str, int]:
    """Each occupied thing's capacity: a GPU's 1000 milli-devices, the host's cpu_millis."""
    worker = state.workers[host]
    return {**{d.device_id: MDEV_PER_DEVICE for d in worker.devices}, CPU_PREFIX: worker.cpu_millis}


@dataclass(slots=True)
class Issued:
    """One occupancy version of a host: the split weights of each GPU and of
    its CPU packages (CPU_PREFIX), `unallocated` included; and when the
    scheduler first sent a newer version (None: not yet)."""

    version: int
    weights: dict[str, dict[str, int]]
    superseded_ns: int | None = None


def issued(state: ClusterState, host: str, version: int) -> Issued:
    held, capacity = occupants(state, host), capacities(state, host)
    return Issued(version, {key: _weights(cap, held.get(key, {})) for key, cap in capacity.items()})


def _weights(capacity: int, held: dict[str, int]) -> dict[str, int]:
    """with_unallocated, also for a host re-registered below what its claims hold
    (then there is no remainder, and the agent splits by the holders alone)."""
    return with_unallocated(max(capacity, sum(held.values())), held)


class Occupancies:
    """The occupancy versions recorded for each host, the last HISTORY of them."""

    def __init__(self) -> None:
        self._by_host: dict[str, deque[Issued]] = {}

    def record(self, state: ClusterState, hosts: Iterable[str], version: int) -> None:
        """`hosts` changed occupancy at receipt `version` (state: right after it)."""
        for host in hosts:
            if host in state.workers:
                self._by_host.setdefault(host, deque(maxlen=HISTORY)).append(issued(state, host, version))

    def seed(self, state: ClusterState, versions: Mapping[str, int]) -> None:
        """After a checkpoint: each host's version in force."""
        for host, version in versions.items():
            self.record(state, (host,), version)

    def sent(self, host: str, version: int, now_ns: int) -> None:
        """`version` went out to the host's agent: every older one is superseded now."""
        for entry in self._by_host.get(host, ()):
            if entry.version < version and entry.superseded_ns is None:
                entry.superseded_ns = now_ns

    def find(self, state: ClusterState, host: str, version: int, current: int, opened_ns: int) -> Issued | None:
        """What the scheduler sent as `version` (current: the host's version now)."""
        if version == current:
            return issued(state, host, version)   # from the state itself: a re-registration may have changed it
        if version == 0:
            return Issued(0, {}, opened_ns)
        return next((e for e in self._by_host.get(host, ()) if e.version == version), None)
