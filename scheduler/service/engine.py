"""The scheduler's state machine: the kernel's state, the observed windows and
the ledger, kept in step.

Every change goes the same way: the kernel decides (pure), the records are
applied once — a schedule pass's events by the pass itself, whose resulting
state is adopted, anything else by the one fold that also replays the ledger
at start-up — queued to the ledger in that order, and only once they are
durable is anyone told: the readers (the committed state is published), the
caller, the watchers, the agents (occupancy). Decisions are serialised by the
event loop: nothing awaits between deciding and queueing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.kernel import (Claim, ClaimAdmitted, ClaimBound, ClaimRefused, ClaimSubmitted, ClusterState, Decision, Event,
                              PendingReasons, Progress, Reason, apply, decide, event_from_body)
from scheduler.kernel.events import Released, Settled
from scheduler.kernel import checkpoint
from scheduler.kernel.fast.edit import Edit
from scheduler.kernel.fast.pmap import PMap
from scheduler.ledger.dcbor import DcborError
from scheduler.ledger.receipts import Entry, check_size
from scheduler.ledger.steward import Prepared, prepare
from scheduler.ledger.writer import GroupCommitWriter
from scheduler.service.windows import window_body
from scheduler.service.committed import Committed
from scheduler.service.encoded import EncodedClaims
from scheduler.service.principal import caller
from scheduler.service.windows.occupancy import Occupancies
from scheduler.service.windows.batch import WINDOWS, Windows, WireWindows, windows_body, windows_from_body
from scheduler.service.windows.projections import Observed

log = logging.getLogger("pool.scheduler")

# (receipt kind, body, what the body was made from: the event or the windows).
# Live folds use the third part instead of decoding the body again; replay
# decodes the body. Both give the same state: bodies round-trip exactly.
Record = tuple[str, dict[str, Any], Any]
ACTOR_MAPS = ("submitted_by", "released_by")


class LedgerFailed(Exception):
    """The ledger could not make a change durable: the process must restart
    and replay, since memory is now ahead of the ledger."""


@dataclass(frozen=True, slots=True)
class Change:
    """What one commit changed, for watchers and agents."""

    claims: frozenset[str]
    workers: frozenset[str]
    time_ns: int
    kinds: tuple[tuple[str, str], ...] = ()  # (claim id, the receipt kind that last changed it)


class Engine:
    def __init__(self, retention: int, checkpoint_every: int = 0) -> None:
        self.state = ClusterState()           # the latest state: what decisions run on
        self.checkpoint_every = checkpoint_every   # receipts between signed checkpoints; 0: none
        self._since_checkpoint = 0
        self._encoded = EncodedClaims()   # each claim's checkpoint encoding, while it is unchanged
        self.observed = Observed(retention)
        self.writer: GroupCommitWriter | None = None
        self.failed: Exception | None = None
        self.ready = False                    # true once the ledger is verified and replayed
        self.waiting_for: str | None = None   # why start-up waits (a full ledger disk): NOT_READY says it
        self.not_leader: Callable[[], Any] | None = None   # on a standby: its NOT_LEADER refusal
        self.claim_seq = PMap()   # claim id -> the receipt that last changed its status
        self._reasons = PendingReasons(self.state)  # why each pending claim waits, see pending_reason
        # worker -> the receipt that last changed its occupancy: the version pushed to its agent,
        # increasing across restarts because replay rebuilds it
        self.occupancy_seq = PMap()
        # claim id -> the principal whose call submitted it, and whose Release ended it (receipt actors)
        self.submitted_by, self.released_by = PMap(), PMap()
        self.witness_keys: frozenset = frozenset()   # trusted witnesses' PublicKeys ([ledger] witness_keys)
        self.occupancies = Occupancies(self.observed.holders)   # what each version was, for checking windows
        self.committed = self._view(0)        # what reads serve (committed.py)
        self._listeners: list[Callable[[Change], None]] = []
        self._last: asyncio.Future | None = None   # the receipts queued last, all durable when it is
        # metrics hooks: each event as it is committed (with a state where the event's
        # claims are as it left them), each refused request by its code
        self.on_event: Callable[[ClusterState, Event], None] = lambda state, event: None
        self.on_refused: Callable[[str], None] = lambda code: None
        # the receipts each commit queues, by the principal whose call caused them (budgets, limits.py)
        self.on_receipts: Callable[[Any, int], None] = lambda principal, n: None

    @property
    def pending_reason(self) -> Mapping[str, Reason]:
        """Why each pending claim waits: its verdict on the current (settled)
        state, what a full re-judge gives, computed when asked and kept until
        the state changes."""
        if self._reasons.state is not self.state:
            self._reasons = PendingReasons(self.state)
        return self._reasons

    # -- the one fold, live and at start-up ---------------------------------

    def fold(self, kind: str, body: dict[str, Any], seq: int, built: Any = None) -> Event | None:
        """Apply one record, the receipt `seq`; the kernel event it was (None for
        windows already counted)."""
        if kind == WINDOWS:
            worker, windows = (body["worker"], built) if built is not None else windows_from_body(body)
            event = self.observed.fold(self.state, worker, windows, seq)
            if event is None:
                return None
        else:
            event = built if built is not None else event_from_body(kind, body)
        self.state = apply(self.state, event)
        self._forget(event)
        return event

    def _forget(self, event: Event) -> None:
        if isinstance(event, Settled):
            self.observed.forget(event.claim_id)

    def snapshot(self) -> dict[str, Any]:
        """What a checkpoint holds: the kernel's state and the receipt seqs the
        service reports. Split rows and idle observations are not kept: after a
        restart from a checkpoint they start again from new windows."""
        snapshot = {"kernel": checkpoint.snapshot(self.state, self._encoded),
                    "claim_seq": dict(sorted(self.claim_seq.items())),
                    "occupancy_seq": dict(sorted(self.occupancy_seq.items())),
                    "window_ends": {w: dict(sorted(e.items())) for w, e in sorted(self.observed.ends.items())}}
        for name in ACTOR_MAPS:   # absent while empty, as in checkpoints written before actors
            if len(getattr(self, name)):
                snapshot[name] = dict(sorted(getattr(self, name).items()))
        return snapshot

    def restore(self, body: dict[str, Any]) -> Engine:
        """The ledger's Fold.restore: start from a checkpoint's snapshot."""
        self.state = checkpoint.restore(body["kernel"])
        self.claim_seq, self.occupancy_seq = PMap(body["claim_seq"]), PMap(body["occupancy_seq"])
        self.submitted_by, self.released_by = (PMap(body.get(name, {})) for name in ACTOR_MAPS)
        self.observed.ends = {w: dict(e) for w, e in body.get("window_ends", {}).items()}
        self.occupancies.seed(self.state, self.occupancy_seq)
        return self

    def replay_entry(self, engine: Engine, entry: Entry) -> Engine:
        """The ledger's Fold.apply: the engine folds in place and is its own state."""
        event = self.fold(entry.kind, entry.body, entry.seq)
        if event is not None:
            hosts: set[str] = set()
            self._stamp(self.state, event, entry.seq, set(), hosts)
            self.occupancies.record(self.state, hosts, entry.seq)
            self._note_actor(event, entry.actor)
        return self

    def _note_actor(self, event: Event, actor: str | None) -> None:
        if actor is None:
            return
        if isinstance(event, ClaimSubmitted):
            self.submitted_by = self.submitted_by.set(event.spec.claim_id, actor)
        elif isinstance(event, Released):
            self.released_by = self.released_by.set(event.claim_id, actor)

    def _stamp(self, state: ClusterState, event: Event, seq: int, claims: set[str], workers: set[str]) -> set[str]:
        """Stamp the claims and workers `event` changes with its receipt's seq,
        adding them to `claims` and `workers`; the claims it changes."""
        mine: set[str] = set()
        hosts: set[str] = set()
        _touched(state, event, mine, hosts)
        for claim_id in mine:
            self.claim_seq = self.claim_seq.set(claim_id, seq)
        for host in hosts:
            self.occupancy_seq = self.occupancy_seq.set(host, seq)
        claims |= mine
        workers |= hosts
        return mine

    def start(self, writer: GroupCommitWriter) -> None:
        """Replay is done: what it rebuilt is durable, and `writer` takes every change from here."""
        self.writer = writer
        # counted from the ledger's last checkpoint, not from this process's start: when leaders
        # change often none would reach checkpoint_every, and every start-up would replay it all
        self._since_checkpoint = writer.steward.since_checkpoint()
        self.committed = self._view(writer.next_seq)

    def _view(self, length: int) -> Committed:
        return Committed(self.state, self.claim_seq, self.occupancy_seq, self.pending_reason, length,
                         self.submitted_by, self.released_by)

    # -- committing ---------------------------------------------------------

    def listen(self, listener: Callable[[Change], None]) -> None:
        self._listeners.append(listener)

    async def commit(self, records: Iterable[Record], now_ns: int) -> Change:
        return await self.queue(records, now_ns)

    def queue(self, records: Iterable[Record], now_ns: int,
              result: ClusterState | None = None) -> Coroutine[Any, Any, Change]:
        """Apply the records and queue them to the ledger, now, in this order;
        what is returned, awaited, waits until they are durable, by which time
        the state they lead to is published to readers and the listeners are
        told. With `result`, the records are kernel events that a schedule pass
        has already applied and `result` is the state they lead to: it is
        adopted, and nothing is applied twice."""
        if self.failed is not None:
            raise LedgerFailed(str(self.failed))
        writer = self.writer
        assert writer is not None
        records = list(records)
        who = caller()
        actor = who.name   # the call in progress, or the scheduler's own work
        # a bad body changes nothing, nor does one too large for a receipt (ReceiptTooLarge)
        prepared = [_prepared(kind, body, built, now_ns, actor) for kind, body, built in records]
        futures: list[asyncio.Future] = []
        claims: set[str] = set()
        workers: set[str] = set()
        kinds: dict[str, str] = {}
        with Edit():   # one batch: the receipt seqs and actors of a commit's claims copy each path once (edit.py)
            for (kind, body, built), item in zip(records, prepared):
                seq = writer.next_seq
                if result is None:
                    event = self.fold(kind, body, seq, built)
                    state = self.state
                else:
                    event, state = built, result
                    self._forget(event)
                if event is not None:
                    self.on_event(state, event)
                    kinds.update(dict.fromkeys(self._stamp(state, event, seq, claims, workers), kind))
                    self._note_actor(event, actor)
                futures.append(writer.enqueue(item))
        if result is not None:
            self.state = result
        for host in workers:   # each host's last version of the commit: the only one its agent can be sent
            self.occupancies.record(self.state, (host,), self.occupancy_seq[host])
        if futures:
            self.on_receipts(who, len(futures))
        checkpoint_due = self._checkpoint(len(futures))
        if checkpoint_due is not None:
            futures.append(checkpoint_due)
        if futures:
            self._last = futures[-1]
        elif self._last is not None:
            futures = [self._last]   # nothing new: published once what is in flight is durable
        view, change = self._view(writer.next_seq), Change(frozenset(claims), frozenset(workers), now_ns,
                                                             tuple(kinds.items()))
        durable = asyncio.gather(*futures)
        # published by the future itself, not by whoever awaits it: a caller that goes
        # away must not keep readers and listeners from hearing of a durable change
        durable.add_done_callback(lambda done: self._published(done, view, change))
        return self._durable(durable, change)

    def _published(self, done: asyncio.Future, view: Committed, change: Change) -> None:
        """Once a commit is durable: publish its state to readers, then tell the listeners."""
        error = done.exception()   # the gather is never cancelled: callers await it shielded
        if error is not None:
            if self.failed is None:
                self.failed = error
                log.critical("%s: ledger append failed; memory is ahead of the ledger, stopping: %s",
                             getattr(error, "code", "LEDGER_UNAVAILABLE"), error)
            return
        if view.length >= self.committed.length:   # always: commits become durable in queue order
            self.committed = view
        for listener in self._listeners:
            listener(change)

    @staticmethod
    async def _durable(durable: asyncio.Future, change: Change) -> Change:
        try:
            # shielded: a caller that goes away must not cancel the ledger's futures, others wait on them
            await asyncio.shield(durable)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise LedgerFailed(str(exc)) from exc
        return change

    async def durable(self) -> None:
        """Wait until everything queued so far is durable and published."""
        await self.queue((), 0)

    async def durable_acked(self, worker: str) -> int:
        """The highest window seq counted for a host, once it is durable: an
        agent drops its buffered windows up to what it is told."""
        acked = self.state.acked.get(worker, 0)
        await self.durable()
        return acked

    def _checkpoint(self, appended: int) -> asyncio.Future | None:
        """Every `checkpoint_every` receipts, compact the state and queue a
        checkpoint of it right behind the receipts it covers (in chunks: any
        size fits). One that cannot be encoded is skipped, and start-up then
        replays from further back."""
        self._since_checkpoint += appended
        if not self.checkpoint_every or self._since_checkpoint < self.checkpoint_every:
            return None
        self._since_checkpoint = 0
        self.compact(self)
        try:
            return self.writer.submit_checkpoint(self.snapshot())
        except DcborError as exc:
            log.warning("checkpoint skipped: %s", exc)
            return None

    def compact(self, engine: Engine) -> Engine:
        """The ledger's Fold.compact, and what a checkpoint does live: drop the
        claims no accounting figure needs any more (checkpoint.compacted), and
        their receipt seqs."""
        before = self.state.claims
        self.state = checkpoint.compacted(self.state)
        if self.state.claims is not before:
            for claim_id in before.keys() - self.state.claims.keys():
                self.claim_seq = self.claim_seq.discard(claim_id)
        return self

    async def decide(self, first: Iterable[Event], now_ns: int) -> Change:
        """Commit `first` and whatever the pending queue then admits, preempts
        or refuses, as one decision (the kernel applies `first` itself)."""
        first = list(first)
        decision = self.preview(first, now_ns)
        return await self.queue([(e.kind, e.to_body(), e) for e in (*first, *decision.events)], now_ns,
                                result=decision.state)

    def preview(self, first: list[Event], now_ns: int) -> Decision:
        """The decision `decide` would commit for `first`, committing nothing:
        decide's own first step, and what a dry run (Claims.Plan) answers."""
        return decide(self.state, first, now_ns)

    def record_windows(self, worker: str, windows: Windows, now_ns: int) -> asyncio.Future[Change]:
        """Fold and queue a batch now; the future resolves once it is durable
        (so a stream can check the next batch meanwhile). A stream that ends
        before it awaits the future leaves a failure to engine.failed, which
        _published has logged: retrieved here, it is not reported again."""
        future = asyncio.ensure_future(self.queue([(WINDOWS, windows_body(worker, windows), windows)], now_ns))
        future.add_done_callback(_retrieved)
        return future


def _retrieved(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


def _prepared(kind: str, body: dict[str, Any], built: Any, now_ns: int, actor: str | None) -> Prepared:
    """A record checked, normalized and sized for the ledger (ValueError, or
    ReceiptTooLarge, if it cannot be a receipt): a batch of windows from its
    columns (window_body.py), anything else value by value."""
    if kind == WINDOWS:
        return window_body.prepared(body, now_ns, actor, wire=type(built) is WireWindows)
    item = prepare(kind, body, now_ns, actor=actor)
    check_size(item.kind, item.body)
    return item


def _touched(after: ClusterState, event: Event, claims: set[str], workers: set[str]) -> None:
    """Claims whose status an event changes (metering is not a status change),
    and workers whose occupancy it changes. `after` is any state from the
    event on: a settled claim keeps the worker it was admitted on (none if it
    was settled while pending), and is never admitted again."""
    if isinstance(event, ClaimSubmitted):
        claims.add(event.spec.claim_id)
    elif isinstance(event, ClaimAdmitted):
        claims.add(event.claim_id)
        if _occupies(after.claims[event.claim_id]):
            workers.add(event.worker)
    elif isinstance(event, ClaimBound):   # RULES §10: the claims it moves, and their host's occupancy
        claims.update(b.claim_id for b in event.bindings)
        workers.add(event.worker_id)
    elif isinstance(event, (ClaimRefused, Progress, Settled)):
        claims.add(event.claim_id)
        claim = after.claims[event.claim_id]
        if isinstance(event, Settled) and claim.worker and _occupies(claim):
            workers.add(claim.worker)


def _occupies(claim: Claim) -> bool:
    """Whether a claim is one of its host's occupants (RULES §2): it holds a GPU
    share or reserved CPU. One with neither is in no device's split, so its
    coming and going is no new occupancy version: a busy host's versions then
    change only when a split does, and windows spooled under one stay checkable."""
    return bool(claim.devices) or claim.spec.resources.cpu_millis > 0
