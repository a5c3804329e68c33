"""The scheduler's state machine: the kernel's state, the observed windows and
the ledger, kept in step.

Every change goes the same way: the kernel decides (pure), the records are
applied with the one fold that also replays the ledger at start-up, queued to
the ledger in that order, and only once they are durable is anyone told —
the caller, the watchers, the agents (occupancy). Decisions are serialised by
the event loop: nothing awaits between deciding and queueing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

from scheduler.kernel import (ClaimAdmitted, ClaimRefused, ClaimState, ClaimSubmitted, ClusterState, Event,
                              Progress, Reason, apply, event_from_body, schedule)
from scheduler.kernel.events import Settled
from scheduler.kernel import checkpoint
from scheduler.ledger.dcbor import DcborError
from scheduler.ledger.receipts import Entry
from scheduler.ledger.writer import GroupCommitWriter
from scheduler.service.observed import WINDOWS, Observed, Windows, windows_body, windows_from_body

log = logging.getLogger("pool.scheduler")

# (receipt kind, body, what the body was made from: the event or the windows).
# Live folds use the third part instead of decoding the body again; replay
# decodes the body. Both give the same state: bodies round-trip exactly.
Record = tuple[str, dict[str, Any], Any]


class LedgerFailed(Exception):
    """The ledger could not make a change durable: the process must restart
    and replay, since memory is now ahead of the ledger."""


@dataclass(frozen=True, slots=True)
class Change:
    """What one commit changed, for watchers and agents."""

    claims: frozenset[str]
    workers: frozenset[str]
    time_ns: int


class Engine:
    def __init__(self, retention: int, checkpoint_every: int = 0) -> None:
        self.state = ClusterState()
        self.checkpoint_every = checkpoint_every   # receipts between signed checkpoints; 0: none
        self._since_checkpoint = 0
        self.observed = Observed(retention)
        self.writer: GroupCommitWriter | None = None
        self.failed: Exception | None = None
        self.ready = False                    # true once the ledger is verified and replayed
        self.claim_seq: dict[str, int] = {}   # claim id -> the receipt that last changed its status
        self.pending_reason: dict[str, Reason] = {}  # why each pending claim waits, as last decided
        # worker -> the receipt that last changed its occupancy: the version pushed to its agent,
        # increasing across restarts because replay rebuilds it
        self.occupancy_seq: dict[str, int] = {}
        self._listeners: list[Callable[[Change], None]] = []
        self._last: asyncio.Future | None = None   # the receipt queued last
        # metrics hooks: each event as it is applied, each refused request by its code
        self.on_event: Callable[[ClusterState, Event], None] = lambda before, event: None
        self.on_refused: Callable[[str], None] = lambda code: None

    # -- the one fold, live and at start-up ---------------------------------

    def fold(self, kind: str, body: dict[str, Any], built: Any = None) -> Event | None:
        """Apply one record; the kernel event it was (None for windows already counted)."""
        if kind == WINDOWS:
            worker, windows = (body["worker"], built) if built is not None else windows_from_body(body)
            event = self.observed.fold(self.state, worker, windows)
            if event is None:
                return None
        else:
            event = built if built is not None else event_from_body(kind, body)
        self.state = apply(self.state, event)
        if isinstance(event, Settled):
            self.observed.forget(event.claim_id)
        return event

    def snapshot(self) -> dict[str, Any]:
        """What a checkpoint holds: the kernel's state and the receipt seqs the
        service reports. Split rows and idle observations are not kept: after a
        restart from a checkpoint they start again from new windows."""
        return {"kernel": checkpoint.snapshot(self.state),
                "claim_seq": dict(sorted(self.claim_seq.items())),
                "occupancy_seq": dict(sorted(self.occupancy_seq.items()))}

    def restore(self, body: dict[str, Any]) -> Engine:
        """The ledger's Fold.restore: start from a checkpoint's snapshot."""
        self.state = checkpoint.restore(body["kernel"])
        self.claim_seq, self.occupancy_seq = dict(body["claim_seq"]), dict(body["occupancy_seq"])
        return self

    def replay_entry(self, engine: Engine, entry: Entry) -> Engine:
        """The ledger's Fold.apply: the engine folds in place and is its own state."""
        before = self.state
        claims: set[str] = set()
        workers: set[str] = set()
        _touched(before, self.fold(entry.kind, entry.body), claims, workers)
        self._stamp(claims, workers, entry.seq)
        return self

    def _stamp(self, claims: set[str], workers: set[str], seq: int) -> None:
        self.claim_seq.update(dict.fromkeys(claims, seq))
        self.occupancy_seq.update(dict.fromkeys(workers, seq))

    # -- committing ---------------------------------------------------------

    def listen(self, listener: Callable[[Change], None]) -> None:
        self._listeners.append(listener)

    async def commit(self, records: Iterable[Record], now_ns: int) -> Change:
        return await self.queue(records, now_ns)

    def queue(self, records: Iterable[Record], now_ns: int) -> Coroutine[Any, Any, Change]:
        """Apply the records and queue them to the ledger, now, in this order;
        what is returned, awaited, waits until they are durable and then tells
        the listeners."""
        if self.failed is not None:
            raise LedgerFailed(str(self.failed))
        assert self.writer is not None
        futures: list[asyncio.Future] = []
        claims: set[str] = set()
        workers: set[str] = set()
        for kind, body, built in records:
            before = self.state
            event = self.fold(kind, body, built)
            if event is not None:
                self.on_event(before, event)
            mine: set[str] = set()
            hosts: set[str] = set()
            _touched(before, event, mine, hosts)
            self._stamp(mine, hosts, self.writer.next_seq)
            claims |= mine
            workers |= hosts
            futures.append(self.writer.submit(kind, body, now_ns))
        checkpoint_due = self._checkpoint(len(futures))
        if checkpoint_due is not None:
            futures.append(checkpoint_due)
        if futures:
            self._last = futures[-1]
        return self._durable(futures, Change(frozenset(claims), frozenset(workers), now_ns))

    async def _durable(self, futures: list[asyncio.Future], change: Change) -> Change:
        try:
            # shielded: a caller that goes away must not cancel the ledger's futures, others wait on them
            await asyncio.shield(asyncio.gather(*futures))
        except Exception as exc:
            self.failed = exc
            log.critical("ledger append failed; memory is ahead of the ledger, stopping: %s", exc)
            raise LedgerFailed(str(exc)) from exc
        for listener in self._listeners:
            listener(change)
        return change

    async def durable_acked(self, worker: str) -> int:
        """The highest window seq counted for a host, once it is durable: an
        agent drops its buffered windows up to what it is told."""
        acked, last = self.state.acked.get(worker, 0), self._last
        if last is not None:
            await asyncio.wait([last])   # the ledger writes in queue order: all before it are durable too
            if last.exception() is not None:
                raise LedgerFailed(str(last.exception()))
        return acked

    def _checkpoint(self, appended: int) -> asyncio.Future | None:
        """Every `checkpoint_every` receipts, queue a checkpoint right behind the
        receipts it covers. One that would not fit in a receipt is skipped:
        start-up then replays from further back."""
        self._since_checkpoint += appended
        if not self.checkpoint_every or self._since_checkpoint < self.checkpoint_every:
            return None
        self._since_checkpoint = 0
        try:
            return self.writer.submit_checkpoint(self.snapshot())
        except DcborError as exc:
            log.warning("checkpoint skipped: %s", exc)
            return None

    async def decide(self, first: Iterable[Event], now_ns: int) -> Change:
        """Commit `first` and whatever the pending queue then admits, preempts
        or refuses, as one decision."""
        first = list(first)
        state = self.state
        for event in first:
            state = apply(state, event)
        decision = schedule(state, now_ns)
        self.pending_reason = dict(decision.reasons)
        return await self.commit([(e.kind, e.to_body(), e) for e in (*first, *decision.events)], now_ns)

    def record_windows(self, worker: str, windows: Windows, now_ns: int) -> asyncio.Future[Change]:
        """Fold and queue a batch now; the future resolves once it is durable
        (so a stream can check the next batch meanwhile)."""
        return asyncio.ensure_future(self.queue([(WINDOWS, windows_body(worker, windows), windows)], now_ns))


def _touched(before: ClusterState, event: Event | None, claims: set[str], workers: set[str]) -> None:
    """Claims whose status an event changes (metering is not a status change),
    and workers whose occupancy it changes."""
    if isinstance(event, ClaimSubmitted):
        claims.add(event.spec.claim_id)
    elif isinstance(event, ClaimAdmitted):
        claims.add(event.claim_id)
        workers.add(event.worker)
    elif isinstance(event, (ClaimRefused, Progress, Settled)):
        claims.add(event.claim_id)
        old = before.claims.get(event.claim_id)
        if isinstance(event, Settled) and old is not None and old.state is ClaimState.ADMITTED:
            workers.add(old.worker)
