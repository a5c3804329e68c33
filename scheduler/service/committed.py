"""The committed state: what every read serves.

Decisions run on the engine's latest state, which is ahead of the ledger
while its receipts are being written. A read must not show that state: a
crash before the receipts are durable takes it back, and a client would have
seen a claim, or an admission, that never happened. So once a commit's
receipts are durable the engine publishes the state they lead to as one
complete, immutable `Committed`: the service's state (state.py), why each
pending claim waits, the length of the ledger it covers, and the bounded
projections read below that length. Every read RPC takes the one published
last (`Engine.read()`) and reads nothing else (Kepler's snapshot, built
aside and published only when complete).

Everything in it is immutable (the service's state, persistent maps
throughout) or replaced whole (the reasons), and the projections are read
only below `length`, so publishing is a reference swap and a reader holding
one sees it unchanged however far the engine has moved on. (Only the
retention can push an old row out of the projections while it is held.)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

from scheduler.kernel import ClusterState, Observation, Reason
from scheduler.kernel.fast.pmap import PMap
from scheduler.service.state import ServiceState
from scheduler.service.windows.projections import GapRecord, Observed, SplitRow


class Committed(NamedTuple):
    service: ServiceState
    pending_reason: Mapping[str, Reason]  # why each pending claim waits, as decided with this state
    length: int                        # receipts durable: everything below this seq
    projections: Observed              # split rows, gaps and observations: read below `length` only

    @property
    def state(self) -> ClusterState:
        return self.service.kernel

    @property
    def claim_seq(self) -> PMap:
        return self.service.claim_seq

    @property
    def occupancy_seq(self) -> PMap:
        return self.service.occupancy_seq

    @property
    def submitted_by(self) -> PMap:
        return self.service.submitted_by

    @property
    def released_by(self) -> PMap:
        return self.service.released_by

    # -- the projections, below the committed length ------------------------

    def splits(self, tenants: frozenset[str] | None, since_ns: int, device_id: str, start: int = 0
               ) -> Iterator[tuple[int, SplitRow]]:
        return self.projections.splits(tenants, since_ns, device_id, self.length, start)

    def gaps(self, tenants: frozenset[str] | None, since_ns: int, device_id: str, start: int = 0
             ) -> Iterator[tuple[int, GapRecord]]:
        return self.projections.numbered_gaps(tenants, since_ns, device_id, self.length, start)

    def observation(self, claim_id: str, window_ns: int) -> Observation | None:
        return self.projections.observation(self.state, claim_id, window_ns, self.length)
