"""The scheduler's write pipeline: the kernel decides, the service's state is
folded (state.py), the receipts are queued to the ledger, and only once they
are durable is anyone told.

Every change goes the same way: a decision (`decide`: the kernel's pass over
the request's events, whose own state is adopted and its events stamped,
state.decided) or a record (`record`, `record_windows`: the one pure fold,
state.fold, that also replays the ledger at start-up), validated against the
latest state by the caller's function, applied once, queued to the ledger in
that order; once durable, the state they lead to is published to readers as
one complete `Committed` snapshot (committed.py, built aside and swapped in),
then the caller, the watchers and the agents (occupancy) hear of it.
Decisions are serialised by the event loop: nothing awaits between deciding
and queueing. The latest state is private: servicers read through `read()`
and change only through decide/record.

(Over 300 lines: one pipeline, its doors and its checkpoints; what a
receipt does to the state is state.py's, and a window's checks windows/'s.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.kernel import ClusterState, Decision, Event, PendingReasons, Reason, decide
from scheduler.kernel.fast.edit import Edit
from scheduler.kernel.events import Settled
from scheduler.ledger.dcbor import DcborError
from scheduler.ledger.fold import Fold
from scheduler.ledger.receipts import Entry, check_size
from scheduler.ledger.steward import Prepared, prepare
from scheduler.ledger.writer import GroupCommitWriter
from scheduler.service import state as service_state
from scheduler.service.committed import Committed
from scheduler.service.encoded import Encoded
from scheduler.service.principal import caller
from scheduler.service.state import Receipt, ServiceState, Step
from scheduler.service.windows import window_body
from scheduler.service.windows.batch import WINDOWS, Windows, WireWindows, windows_body
from scheduler.service.windows.occupancy import Occupancies
from scheduler.service.windows.projections import Observed

log = logging.getLogger("pool.scheduler")

# (receipt kind, body, what the body was made from: the event or the windows).
# Live folds use the third part instead of decoding the body again; replay
# decodes the body. Both give the same state: bodies round-trip exactly.
Record = tuple[str, dict[str, Any], Any]
# what a change is judged by: the latest state -> the events to commit (raising Refused if none may be)
Judge = Callable[[ServiceState], Iterable[Event]]
# the checkpoint's kept encodings (encoded.py) are brought to the latest state between calls every
# KEEP_EVERY receipts, KEEP_CHUNK entries a step (~5 ms): a checkpoint then encodes what changed since
KEEP_EVERY = 256
KEEP_CHUNK = 100


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
        self._latest = ServiceState()         # what decisions run on: ahead of the ledger while it writes
        self.checkpoint_every = checkpoint_every   # receipts between signed checkpoints; 0: none
        self._since_checkpoint = 0
        self._encoded = Encoded()   # the checkpoint's per-claim parts, encoded as they change (encoded.py)
        self._since_kept = 0        # receipts since keep_encoded last began a pass
        self._keep_due = asyncio.Event()
        # the bounded projections, fed from each step of the fold, read below a committed length
        self.observed = Observed(retention)
        self.occupancies = Occupancies(self.observed.holders)   # what each version was, for checking windows
        self.writer: GroupCommitWriter | None = None
        self.failed: Exception | None = None
        self.ready = False                    # true once the ledger is verified and replayed
        self.waiting_for: str | None = None   # why start-up waits (a full ledger disk): NOT_READY says it
        self.not_leader: Callable[[], Any] | None = None   # on a standby: its NOT_LEADER refusal
        self._reasons = PendingReasons(self._latest.kernel)  # why each pending claim waits, see _pending_reason
        self.witness_keys: frozenset = frozenset()   # trusted witnesses' PublicKeys ([ledger] witness_keys)
        self._committed = self._view(0)       # what reads serve (committed.py)
        self._listeners: list[Callable[[Change], None]] = []
        # metrics hooks: each event as it is committed (with a state where the event's
        # claims are as it left them), each refused request by its code
        self.on_event: Callable[[ClusterState, Event], None] = lambda state, event: None
        self.on_refused: Callable[[str], None] = lambda code: None
        # the receipts each commit queues, by the principal whose call caused them (budgets, limits.py)
        self.on_receipts: Callable[[Any, int], None] = lambda principal, n: None

    def read(self) -> Committed:
        """The one door for reads: the snapshot published last, all of it durable."""
        return self._committed

    @property
    def _pending_reason(self) -> Mapping[str, Reason]:
        """Why each pending claim waits: its verdict on the latest (settled)
        state, what a full re-judge gives, computed when asked and kept until
        the state changes."""
        if self._reasons.state is not self._latest.kernel:
            self._reasons = PendingReasons(self._latest.kernel)
        return self._reasons

    # -- replay: the ledger's Fold --------------------------------------------

    def replayed(self, state: ServiceState, entry: Entry) -> ServiceState:
        """The ledger's Fold.apply: the one pure fold (state.fold), with the
        projections fed from its step beside the state."""
        done = service_state.step(state, Receipt(entry.kind, entry.body, entry.seq, entry.actor))
        self._feed(state, done, entry.seq)
        self.occupancies.record(done.state.kernel, done.workers, entry.seq)
        self._latest = done.state
        return done.state

    def restore(self, body: dict[str, Any]) -> ServiceState:
        """The ledger's Fold.restore: start from a checkpoint's snapshot."""
        state = service_state.restore(body)
        self.occupancies.seed(state.kernel, state.occupancy_seq)
        self._latest = state
        return state

    def compact(self, state: ServiceState) -> ServiceState:
        """The ledger's Fold.compact (state.compact)."""
        self._latest = service_state.compact(state)
        return self._latest

    def snapshot(self) -> dict[str, Any]:
        """A checkpoint of the latest state (state.snapshot)."""
        return service_state.snapshot(self._latest, self._encoded)

    def ledger_fold(self, resume: bool = True) -> Fold:
        """The ledger's Fold for a replay into this engine (from the last
        checkpoint, or with resume=False from genesis)."""
        return Fold(self.replayed, self._latest, restore=self.restore if resume else None, compact=self.compact)

    def _feed(self, before: ServiceState, done: Step, seq: int) -> None:
        """The projections, from one step of the fold."""
        if done.windows is not None:
            self.observed.feed(before.kernel, done.worker, done.windows, seq)
        elif isinstance(done.event, Settled):
            self.observed.forget(done.event.claim_id)

    def start(self, writer: GroupCommitWriter) -> None:
        """Replay is done: what it rebuilt is durable, and `writer` takes every change from here."""
        self.writer = writer
        # counted from the ledger's last checkpoint, not from this process's start: when leaders
        # change often none would reach checkpoint_every, and every start-up would replay it all
        self._since_checkpoint = writer.steward.since_checkpoint()
        self._committed = self._view(writer.next_seq)

    def _view(self, length: int) -> Committed:
        return Committed(self._latest, self._pending_reason, length, self.observed)

    # -- committing ---------------------------------------------------------

    def listen(self, listener: Callable[[Change], None]) -> None:
        self._listeners.append(listener)

    async def record(self, judge: Judge, now_ns: int) -> Change:
        """Commit the events `judge` finds on the latest state, each folded on
        its own (no schedule pass: a change that frees or takes nothing); when
        it finds none, wait for what is in flight to be durable."""
        events = list(judge(self._latest))
        if not events:
            await self.durable()
            return Change(frozenset(), frozenset(), now_ns)
        return await self.queue([(e.kind, e.to_body(), e) for e in events], now_ns)

    def queue(self, records: Iterable[Record], now_ns: int,
              decision: Decision | None = None) -> Coroutine[Any, Any, Change]:
        """Fold the records and queue them to the ledger, now, in this order;
        what is returned, awaited, waits until they are durable, by which time
        the state they lead to is published to readers and the listeners are
        told. With `decision`, the records are its events, which its schedule
        pass has already applied: its state is adopted and the events stamped
        (state.decided), and nothing is applied twice."""
        if self.failed is not None:
            raise LedgerFailed(str(self.failed))
        writer = self.writer
        assert writer is not None
        records = list(records)
        who = caller()
        actor = who.name   # the call in progress, or the scheduler's own work
        # a bad body changes nothing, nor does one too large for a receipt (ReceiptTooLarge)
        prepared = [_prepared(kind, body, built, now_ns, actor) for kind, body, built in records]
        first = writer.next_seq
        with Edit():   # one batch: the receipt seqs and actors of a commit's claims copy each path once (edit.py)
            if decision is None:   # each record folded on its own
                latest, steps = self._latest, []
                for seq, (kind, body, built) in enumerate(records, first):
                    done = service_state.step(latest, Receipt(kind, body, seq, actor, built))
                    self._feed(latest, done, seq)
                    latest = done.state
                    steps.append(done)
            else:
                latest, steps = service_state.decided(self._latest, decision.state, [e for _, _, e in records],
                                                      range(first, first + len(records)), actor)
                for done in steps:
                    self._feed(done.state, done, first)
        self._latest = latest   # every record folded: now each is queued, in order, with the seq it was given
        futures = [writer.enqueue(item) for item in prepared]
        claims: set[str] = set()
        workers: set[str] = set()
        kinds: dict[str, str] = {}
        for (kind, _, _), done in zip(records, steps):
            if done.event is not None:
                self.on_event(done.state.kernel, done.event)
                kinds.update(dict.fromkeys(done.claims, kind))
                claims |= done.claims
                workers |= done.workers
        for host in workers:   # each host's last version of the commit: the only one its agent can be sent
            self.occupancies.record(latest.kernel, (host,), latest.occupancy_seq[host])
        if futures:
            self.on_receipts(who, len(futures))
        self._checkpoint(len(futures))
        if writer.last is not None and (not futures or futures[-1] is not writer.last):
            # what the writer queued last: a checkpoint's chunk after these receipts, or, with
            # nothing new, what is in flight; the view below counts it, so it is published after it
            futures.append(writer.last)
        view, change = self._view(writer.next_seq), Change(frozenset(claims), frozenset(workers), now_ns,
                                                             tuple(kinds.items()))
        durable = asyncio.gather(*futures)
        # published by the future itself, not by whoever awaits it: a caller that goes
        # away must not keep readers and listeners from hearing of a durable change
        durable.add_done_callback(lambda done: self._published(done, view, change))
        return self._durable(durable, change)

    def _published(self, done: asyncio.Future, view: Committed, change: Change) -> None:
        """Once a commit is durable: publish its snapshot to readers (a swap of
        one reference), then tell the listeners."""
        error = done.exception()   # the gather is never cancelled: callers await it shielded
        if error is not None:
            self._failed(error, "")
            return
        if view.length >= self._committed.length:   # always: commits become durable in queue order
            self._committed = view
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
        acked = self._latest.kernel.acked.get(worker, 0)
        await self.durable()
        return acked

    def _checkpoint(self, appended: int) -> None:
        """Every `checkpoint_every` receipts, compact the state and begin a
        checkpoint of it right behind the receipts it covers; the writer
        spreads its chunks over the batches that follow (writer.py), and no
        call waits for it. Another one is begun only once it is written. One
        that cannot be encoded is skipped, and start-up then replays from
        further back; one that cannot be stored stops the ledger, as any
        append does."""
        self._since_checkpoint += appended
        self._since_kept += appended
        if self.checkpoint_every and self._since_kept >= KEEP_EVERY:
            self._keep_due.set()
        if not self.checkpoint_every or self._since_checkpoint < self.checkpoint_every \
                or self.writer.checkpointing:
            return
        self._since_checkpoint = 0
        self._latest = service_state.compact(self._latest)
        try:
            written = self.writer.submit_checkpoint(self.snapshot())
        except DcborError as exc:
            log.warning("checkpoint skipped: %s", exc)
            return
        written.add_done_callback(self._checkpoint_written)

    def _checkpoint_written(self, written: asyncio.Future) -> None:
        error = None if written.cancelled() else written.exception()
        if error is not None:
            self._failed(error, " (a checkpoint's chunk)")

    def _failed(self, error: BaseException, what: str) -> None:
        """An append could not be made durable: memory is ahead of the ledger,
        and from now on every commit is refused (LedgerFailed)."""
        if self.failed is None:
            self.failed = error
            log.critical("%s: ledger append failed%s; memory is ahead of the ledger, stopping: %s",
                         getattr(error, "code", "LEDGER_UNAVAILABLE"), what, error)

    async def keep_encoded(self, chunk: int = KEEP_CHUNK) -> None:
        """Between calls, for as long as it runs (main.py, once serving): the
        checkpoint's kept encodings brought to the latest state right away
        (every claim, after a start-up) and then every KEEP_EVERY receipts,
        `chunk` entries at a time, yielding to the event loop after each, so
        that no call waits behind more than one chunk. A checkpoint then holds
        the loop for what changed since the last pass, not for every claim."""
        self._keep_due.set()
        while True:
            await self._keep_due.wait()
            self._keep_due.clear()
            self._since_kept = 0
            if self.checkpoint_every:
                for _ in service_state.kept(self._latest, self._encoded, chunk):
                    await asyncio.sleep(0)

    async def decide(self, first: Iterable[Event] | Judge, now_ns: int) -> Change:
        """Commit `first` and whatever the pending queue then admits, preempts
        or refuses, as one decision (the kernel applies `first` itself).
        `first` may be a function of the latest state (a Judge): then, when it
        finds nothing to change, nothing is decided, and the call waits for
        what is in flight to be durable."""
        if callable(first):
            first = list(first(self._latest))
            if not first:
                await self.durable()
                return Change(frozenset(), frozenset(), now_ns)
        first = list(first)
        decision = decide(self._latest.kernel, first, now_ns)
        return await self.queue([(e.kind, e.to_body(), e) for e in (*first, *decision.events)], now_ns,
                                decision=decision)

    def preview(self, judge: Callable[[ServiceState], list[Event]], now_ns: int
                ) -> tuple[ServiceState, Decision | None]:
        """The decision `decide` would commit for the events `judge` finds on
        the latest state, committing nothing: the state it was judged on and
        the decision (None when `judge` finds none). What a dry run
        (Claims.Plan, Bind's dry run) answers; a decision's own first step."""
        latest = self._latest
        return latest, self.previewed(latest, judge, now_ns)

    def read_latest(self) -> ServiceState:
        """The latest state, ahead of the ledger (an immutable value): what a
        preview off the event loop is judged on (Claims.Plan)."""
        return self._latest

    @staticmethod
    def previewed(latest: ServiceState, judge: Callable[[ServiceState], list[Event]], now_ns: int
                  ) -> Decision | None:
        """`preview` on a given state: a pure function of it, safe off the event loop."""
        first = judge(latest)
        return decide(latest.kernel, first, now_ns) if first else None

    def record_windows(self, worker: str, judge: Callable[[ServiceState], Windows | None], now_ns: int
                       ) -> Counting | None:
        """Fold and queue the windows `judge` admits on the latest state (the
        evidence door); its future resolves once they are durable, so a stream
        can check the next batch meanwhile. None when `judge` answers None (it
        cannot count them yet: nothing is recorded). A stream that ends before
        it awaits the future leaves a failure to engine.failed, which _published
        has logged: retrieved here, it is not reported again."""
        fresh = judge(self._latest)
        if fresh is None:
            return None
        durable = None
        if fresh.seq:
            durable = asyncio.ensure_future(self.queue([(WINDOWS, windows_body(worker, fresh), fresh)], now_ns))
            durable.add_done_callback(_retrieved)
        return Counting(durable, self._latest.kernel.acked.get(worker, 0), len(fresh.seq))


@dataclass(frozen=True, slots=True)
class Counting:
    """A batch being counted: durable once its receipt is (None: nothing new),
    the host's counted seq to acknowledge then, and how many windows were new."""

    durable: asyncio.Future | None
    acked: int
    windows: int


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
