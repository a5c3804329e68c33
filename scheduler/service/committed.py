"""The committed state: what every read serves.

Decisions run on the engine's latest state, which is ahead of the ledger
while its receipts are being written. A read must not show that state: a
crash before the receipts are durable takes it back, and a client would have
seen a claim, or an admission, that never happened. So once a commit's
receipts are durable the engine publishes the state they lead to, with the
service's own figures at that point, as one immutable `Committed`; every read
RPC takes the one published last and reads nothing else (Kepler's snapshot,
published only when complete).

Everything in it is immutable (the kernel's state and persistent maps) or
replaced whole (the reasons), so publishing is a reference swap and a reader
holding one sees it unchanged however far the engine has moved on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from scheduler.kernel import ClusterState, Reason
from scheduler.kernel.fast.pmap import PMap


class Committed(NamedTuple):
    state: ClusterState
    claim_seq: PMap                    # claim id -> the receipt that last changed its status
    occupancy_seq: PMap                # worker -> the receipt that last changed its occupancy
    pending_reason: Mapping[str, Reason]  # why each pending claim waits, as decided with this state
    length: int                        # receipts durable: everything below this seq
    submitted_by: PMap = PMap()        # claim id -> the principal whose call submitted it (receipt actors)
    released_by: PMap = PMap()         # claim id -> the principal whose Release ended it
