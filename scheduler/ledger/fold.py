"""Replay: one fold from receipts to state, used live and at start-up.

The caller's `apply(state, entry) -> state` must be pure in what it returns:
the state is a function of the state and entry given, never of anything the
caller kept, so replaying a ledger gives exactly the state the live process
had after the same appends. (The scheduler's apply, `Engine.replayed`, is
the pure `state.fold` and also feeds projections kept beside the state,
split rows and the like, which the state never reads.) The
ledger's own kinds (genesis, witness, checkpoint) are never passed to `apply`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from scheduler.ledger import dcbor
from scheduler.ledger.keys import PublicKey
from scheduler.ledger.receipts import CHECKPOINT, CHECKPOINT_CHUNK, LEDGER_KINDS, Entry
from scheduler.ledger.store import Store
from scheduler.ledger.verify import LedgerInvalid, verify


@dataclass(frozen=True)
class Fold:
    apply: Callable[[Any, Entry], Any]
    initial: Any
    restore: Callable[[Any], Any] | None = None   # a checkpoint's state -> state
    snapshot: Callable[[Any], Any] | None = None  # state -> a det-CBOR value
    # state -> state where each checkpoint passed without resuming was taken (before
    # its first chunk, even one a crash left without its checkpoint): the history the
    # caller drops when it takes a checkpoint (the scheduler compacts), so a full
    # replay ends where the live process did
    compact: Callable[[Any], Any] | None = None


class CheckpointMismatch(Exception):
    """A checkpoint whose snapshot differs from the state replayed up to it, or
    whose chunks do not add up to the state it signs."""


def checkpoint_state(entry: Entry, chunks: list[bytes]) -> Any:
    """The state a checkpoint receipt signs, from the chunks before it
    (docs/LEDGER.md §9); CheckpointMismatch if they are not what it signs."""
    body = entry.body
    if "state" in body:   # the first format: the state inline (no chunks)
        return body["state"]
    data = b"".join(chunks)
    if len(chunks) != body["chunks"] or len(data) != body["size"] or hashlib.sha256(data).digest() != body["digest"]:
        raise CheckpointMismatch(f"checkpoint {entry.seq}: the {len(chunks)} chunks before it ({len(data)} bytes) "
                                 f"are not the {body['chunks']} chunks of {body['size']} bytes with the SHA-256 "
                                 "it signs")
    try:
        return dcbor.decode_authenticated(data)
    except dcbor.DcborError as exc:
        raise CheckpointMismatch(f"checkpoint {entry.seq}: its state is not det-CBOR: {exc}") from None


class Unfoldable(Exception):
    """A verified receipt the caller's fold cannot apply (its body is not what
    its kind's writer makes): start-up names it instead of crashing on it."""

    def __init__(self, entry: Entry, error: Exception) -> None:
        super().__init__(f"receipt {entry.seq}: body: {entry.kind}: {type(error).__name__}: {error}")
        self.seq = entry.seq


class Folder:
    """The on_entry callback of a verification: folds caller kinds. A
    checkpoint holds the state before its first chunk (docs/LEDGER.md §9):
    there the folder compacts as the live process did when it took the
    checkpoint, and audits it (snapshot given) once the checkpoint receipt
    comes; or, resuming from it, holds the receipts between its chunks until
    the checkpoint receipt gives the state to fold them on."""

    def __init__(self, fold: Fold) -> None:
        self.fold = fold
        self.state = fold.initial
        self.resuming = False     # set when start-up resumes from a checkpoint
        self._chunks: list[bytes] = []   # of the checkpoint being resumed from
        self._held: list[Entry] = []     # the caller's receipts between its chunks
        self._taken: bytes | None = None   # the snapshot's SHA-256 at the last chunk 0 (auditing)

    def __call__(self, entry: Entry) -> None:
        if entry.kind == CHECKPOINT_CHUNK:
            if self.resuming:
                self._chunks.append(entry.body["data"])
            elif entry.body["index"] == 0:
                self._taken = self._take()
        elif entry.kind == CHECKPOINT:
            self._checkpoint(entry)
        elif entry.kind not in LEDGER_KINDS:
            if self.resuming:
                self._held.append(entry)
            else:
                self._apply(entry)

    def _apply(self, entry: Entry) -> None:
        try:
            self.state = self.fold.apply(self.state, entry)
        except Exception as error:
            raise Unfoldable(entry, error) from error

    def _take(self) -> bytes | None:
        """Where the live process took a checkpoint: compact the state as it
        did; its snapshot's SHA-256 when auditing."""
        if self.fold.compact is not None:
            self.state = self.fold.compact(self.state)
        if self.fold.snapshot is None:
            return None
        return hashlib.sha256(dcbor.encode(self.fold.snapshot(self.state), limit=None)).digest()

    def _checkpoint(self, entry: Entry) -> None:
        if self.resuming:
            try:
                self.state = self.fold.restore(checkpoint_state(entry, self._chunks))
            except CheckpointMismatch:
                raise
            except Exception as error:
                raise Unfoldable(entry, error) from error
            held, self.resuming, self._chunks, self._held = self._held, False, [], []
            for later in held:
                self._apply(later)
            return
        if "state" in entry.body:   # the first format: taken at the checkpoint receipt itself
            if self.fold.compact is not None:
                self.state = self.fold.compact(self.state)
            if self.fold.snapshot is not None and dcbor.normalize(self.fold.snapshot(self.state)) != entry.body["state"]:
                raise CheckpointMismatch(f"checkpoint {entry.seq} differs from the replayed state")
            return
        taken, self._taken = self._taken, None
        if self.fold.snapshot is not None and taken != entry.body["digest"]:
            raise CheckpointMismatch(f"checkpoint {entry.seq} differs from the state replayed up to its first chunk")


def replay(source: Store | Iterable[bytes], apply: Callable[[Any, Entry], Any], initial: Any, *,
           key: PublicKey | None = None, snapshot: Callable[[Any], Any] | None = None,
           workers: int | None = None) -> Any:
    """Verify every receipt, folding as it goes; the state, or LedgerInvalid.
    With `snapshot`, every checkpoint on the way is audited against the fold."""
    folder = Folder(Fold(apply, initial, snapshot=snapshot))
    receipts = source.read() if hasattr(source, "read") else source
    report = verify(receipts, key, on_entry=folder, workers=workers)
    if not report.valid:
        raise LedgerInvalid(report)
    return folder.state
