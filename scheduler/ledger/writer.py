"""Group commit for asyncio callers (the gRPC service).

`append` validates on the event loop (so a bad body fails only its caller),
then waits. One drain task takes everything queued as a batch, signs it in one
thread and stores it as one transaction in another, and resolves each future
only after its batch is durable. Batches are signed and stored in order; the
next batch is signed while the previous one is being stored, so signing does
not wait for the disk. A checkpoint goes a piece to a batch (submit_checkpoint),
so that however large the state, no append waits behind all of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor

from scheduler.ledger.keys import PublicKey
from scheduler.ledger.receipts import Receipt
from scheduler.ledger.steward import CheckpointPieces, Prepared, Steward, prepare


class GroupCommitWriter:
    def __init__(self, steward: Steward, max_batch: int = 4096) -> None:
        self.steward = steward
        self._max_batch = max_batch
        self._queue: list[tuple[Prepared, asyncio.Future]] = []
        self._drain: asyncio.Task | None = None
        self._signer = ThreadPoolExecutor(1, thread_name_prefix="ledger-sign")
        self._storer = ThreadPoolExecutor(1, thread_name_prefix="ledger-store")
        # the seq the next queued append will get: known when queued, since this
        # writer is the ledger's only way in while it runs
        self.next_seq = steward.length
        self.last: asyncio.Future | None = None   # the append queued last: when it is durable, all are
        self._checkpoint: tuple[CheckpointPieces, asyncio.Future] | None = None   # one being written, and its future
        self._piece: asyncio.Future | None = None   # its chunk queued last

    def submit(self, kind: str, body: dict, time_ns: int | None = None, actor: str | None = None
               ) -> asyncio.Future:
        """Queue an append now: the order of submit calls is the order in the
        ledger. The future resolves to the receipt once it is durable."""
        return self.enqueue(prepare(kind, body, time_ns, actor=actor))

    def submit_witness(self, statement: bytes, trusted: Collection[PublicKey] | None = None,
                       actor: str | None = None) -> asyncio.Future | None:
        """Queue a witness's statement (WitnessRejected now if it does not check);
        None when the ledger has it, or it is queued, already (steward.prepare_witness)."""
        item = self.steward.prepare_witness(statement, trusted, actor)
        return None if item is None else self.enqueue(item)

    def submit_checkpoint(self, snapshot: object) -> asyncio.Future:
        """Begin a checkpoint of the state that the receipts queued so far lead
        to: its first chunk is queued now, right behind them; the other chunks
        and then the checkpoint receipt go one to a batch, after whatever was
        queued before each batch was taken (docs/LEDGER.md §7), so that no
        append waits behind the whole checkpoint. The future is the checkpoint
        receipt's. RuntimeError while another checkpoint is being written."""
        if self._checkpoint is not None:
            raise RuntimeError("a checkpoint is being written already")
        checkpoint = self.steward.prepare_checkpoint(snapshot, self.next_seq)
        done = asyncio.get_running_loop().create_future()
        self._checkpoint = (checkpoint, done)
        self._next_piece()
        return done

    @property
    def checkpointing(self) -> bool:
        """A checkpoint's chunks are still being written."""
        return self._checkpoint is not None

    def enqueue(self, item: Prepared, future: asyncio.Future | None = None) -> asyncio.Future:
        """Queue an append already prepared (steward.prepare), like submit."""
        self.next_seq += 1
        future = future or asyncio.get_running_loop().create_future()
        self.last = future
        self._queue.append((item, future))
        if self._drain is None:
            self._drain = asyncio.create_task(self._drain_queue())
        return future

    def _next_piece(self) -> None:
        """Queue the checkpoint's next append once the one before is durable:
        one piece in flight at a time, so an append queued meanwhile waits for
        one piece's store at most. The last append gets the checkpoint's
        future; a piece that could not be stored fails it, and ends it."""
        checkpoint, done = self._checkpoint
        piece = self._piece
        if piece is not None and not piece.done():
            return
        if piece is not None and (piece.cancelled() or piece.exception() is not None):
            self._checkpoint = self._piece = None
            if piece.cancelled():
                done.cancel()
            else:
                done.set_exception(piece.exception())
            return
        item = next(checkpoint)
        if checkpoint.done:
            self._checkpoint = self._piece = None
            self.enqueue(item, done)
        else:
            self._piece = self.enqueue(item)

    async def append(self, kind: str, body: dict, time_ns: int | None = None) -> Receipt:
        return await self.submit(kind, body, time_ns)

    async def _drain_queue(self) -> None:
        loop = asyncio.get_running_loop()
        stored: asyncio.Future | None = None   # the previous batch's store
        try:
            while True:
                if self._checkpoint is not None:   # one piece a batch, after what was queued before it
                    self._next_piece()
                if not self._queue:
                    if stored is None or stored.done():
                        break   # nothing queued, nothing in flight: no await until finally
                    await stored   # appends queued meanwhile are taken on the next turn
                    continue
                batch = self._queue[:self._max_batch]
                del self._queue[:self._max_batch]
                try:
                    made = await loop.run_in_executor(self._signer, self.steward.sign, [item for item, _ in batch])
                except Exception as exc:   # nothing of this batch is signed
                    _fail(batch, exc)
                    continue
                stored = asyncio.ensure_future(self._store(batch, made, stored))
        finally:
            self._drain = None

    async def _store(self, batch: list, made: list[Receipt], previous: asyncio.Future | None) -> None:
        if previous is not None:
            await previous   # stores, and so acknowledgements, in signing order
        try:
            await asyncio.get_running_loop().run_in_executor(self._storer, self.steward.store, made)
        except Exception as exc:   # nothing of this batch is stored
            _fail(batch, exc)
            return
        for (_, future), receipt in zip(batch, made):
            if not future.done():
                future.set_result(receipt)

    async def close(self) -> None:
        """Wait for queued appends, then stop the threads."""
        while self._drain is not None:
            await asyncio.shield(self._drain)
        self._signer.shutdown()
        self._storer.shutdown()


def _fail(batch: list, exc: Exception) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(exc)
