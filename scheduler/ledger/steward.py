"""The steward: the one writer of a ledger. Opening verifies (and replays) the
store and refuses one that does not verify, saying where and why; appends sign
sequentially (each prev is the previous receipt's hash) and return only once the
store has made them durable."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from scheduler.ledger import bodies, cose, dcbor, merkle, note, receipts, witness
from scheduler.ledger.bodies import CheckpointRun
from scheduler.ledger.index import claim_of
from scheduler.ledger.fold import Fold, Folder
from scheduler.ledger.keys import PublicKey, SigningKey
from scheduler.ledger.receipts import (CHECKPOINT, CHECKPOINT_CHUNK, COSIGNED, GENESIS, LEDGER_KINDS, LOSS_ACCEPTED,
                                       WITNESS, Receipt)
from scheduler.ledger.sqlite import SqliteStore
from scheduler.ledger.store import HistoryLost, Loss, Store, StoreError, recorded_loss
from scheduler.ledger.verify import Anchor, LedgerInvalid, Report, WitnessSeen, verify


# checkpoint state bytes per checkpoint_chunk receipt the steward writes (a verifier takes up to
# bodies.CHUNK_LIMIT, 4 MiB): small, so that the group commit can write a checkpoint a piece per batch
# among the receipts that come after it, each batch a few milliseconds longer (writer.py)
CHUNK_BYTES = 256 << 10

# the body is a map inside the core map: its depth counts from 1, so a body that
# normalizes decodes again inside its core (dcbor.MAX_DEPTH counts the core too)
BODY_DEPTH = 1


class Prepared(NamedTuple):
    """An append checked and normalized, waiting for its turn to be signed."""
    kind: str
    body: dict
    time_ns: int | None
    actor: str | None = None   # the principal whose call caused it


class LedgerInfo(NamedTuple):
    ledger_id: bytes
    length: int
    head: bytes
    steward_key_id: bytes
    witnessed_length: int
    witness_key_id: bytes | None


def prepare(kind: str, body: dict, time_ns: int | None = None, *, internal: bool = False,
            actor: str | None = None) -> Prepared:
    """ValueError (dcbor.DcborError for the body) if this cannot become a receipt."""
    if type(kind) is not str or not kind:
        raise ValueError("a kind is a non-empty text string")
    if kind in LEDGER_KINDS and not internal:
        raise ValueError(f"kind {kind!r} is the ledger's own")
    if type(body) is not dict:
        raise dcbor.DcborError("unencodable", "a body is a map with text keys")
    if time_ns is not None and not (type(time_ns) is int and 0 <= time_ns < 1 << 64):
        raise ValueError("time_ns is a non-negative integer")
    if actor is not None and not (type(actor) is str and actor):
        raise ValueError("an actor is a non-empty text string")
    return Prepared(kind, dcbor.normalize(body, BODY_DEPTH), time_ns, actor)


class CheckpointPieces:
    """A checkpoint being written: its state's det-CBOR bytes cut into
    CHUNK_BYTES pieces, one `checkpoint_chunk` each, then the `checkpoint`
    receipt that signs their number, size and SHA-256, where the first chunk
    lies (`first_seq`) and the witnessed length then. An iterator of the
    appends, made as they are taken (the digest is summed a piece at a time),
    so that a writer can spread them over its batches."""

    def __init__(self, data: bytes, first_seq: int, witnessed_length: int, witness_key_id: bytes | None) -> None:
        self._data, self._at, self._index, self._hash = data, 0, 0, hashlib.sha256()
        self.first_seq, self._witness = first_seq, (witnessed_length, witness_key_id)
        self.done = False

    def __iter__(self) -> Iterator[Prepared]:
        return self

    def __next__(self) -> Prepared:
        if self.done:
            raise StopIteration
        data = self._data
        if self._index == 0 or self._at < len(data):
            piece = data[self._at:self._at + CHUNK_BYTES]
            self._hash.update(piece)
            item = prepare(CHECKPOINT_CHUNK, {"index": self._index, "data": piece}, internal=True)
            self._at, self._index = self._at + len(piece), self._index + 1
            return item
        self.done = True
        length, key_id = self._witness
        return prepare(CHECKPOINT, {"chunks": self._index, "size": len(data), "digest": self._hash.digest(),
                                    "first_chunk": self.first_seq, "witnessed_length": length,
                                    "witness_key_id": key_id}, internal=True)


def accepted(loss: Loss) -> Prepared:
    """The receipt that says a loss was accepted, appended where the store now ends.
    An unreadable head record says nothing of what was durable: the receipt
    records the length the store had then, and a head of 32 zero bytes."""
    if loss.unreadable:
        loss = Loss(loss.length, bytes(32), loss.length)
    return prepare(LOSS_ACCEPTED, {"recorded_length": loss.recorded_length,
                                   "recorded_head": loss.recorded_head, "length": loss.length},
                   internal=True)


class Steward:
    def __init__(self, store: Store, key: SigningKey, report: Report, state: Any,
                 folder: Folder | None = None, run: CheckpointRun | None = None) -> None:
        self._store, self._key, self.state = store, key, state
        self._folder = folder
        # the chunks of a checkpoint being written as the last verification saw them: follow goes on from there
        self._run = run or CheckpointRun()
        self._lock, self._sign_lock = threading.Lock(), threading.Lock()
        self._length, self._head, self.ledger_id = report.length, report.head, report.ledger_id
        self._signed_length, self._signed_head = self._length, self._head
        self._witness = WitnessSeen(report.witness.key_id, report.witnessed_length, None) \
            if report.witnessed_length else None
        self.cosigned: note.Note | None = None   # the latest cosigned checkpoint recorded
        at = store.latest(COSIGNED) if self._length else None
        if at is not None:
            self._note_cosigned(next(store.read(at, at + 1)))
        # (witness key id, length) of each statement in the ledger, or queued to it: one receipt each.
        # Those replayed past (before the checkpoint replay started from) are known by the last only.
        self._statements: set[tuple[bytes, int]] = {(self._witness.key_id, self._witness.length)} \
            if self._witness else set()

    @classmethod
    def open(cls, store: Store, key: SigningKey, fold: Fold | None = None, *,
             workers: int | None = None, accept_loss: bool = False) -> Steward:
        """Verify the store (from its last checkpoint when fold.restore is given),
        fold it, or start a new ledger with a genesis receipt if it is empty.
        A store that lost acknowledged receipts (its `loss`) is refused with
        HistoryLost before anything is written, unless `accept_loss`: then,
        once what remains verifies, a `loss_accepted` receipt records the loss."""
        loss = recorded_loss(store)
        if loss is not None:
            if not accept_loss:
                raise HistoryLost(f"ledger {getattr(store, 'path', 'store')}", loss)
            store.accept_loss()
        if store.length() == 0:
            genesis = receipts.make(key, 0, receipts.ZERO_HASH, time.time_ns(), GENESIS,
                                    {"steward_key": key.public.raw})
            store.append(0, [(GENESIS, genesis.raw)])
        folder = Folder(fold or Fold(lambda state, entry: state, None))
        anchor = _checkpoint_anchor(store, key, folder)
        start = anchor.index if anchor else 0
        statements: list[bytes] = []
        run = CheckpointRun()
        report = verify(store.read(start), key.public, on_entry=_noting(statements, folder), workers=workers,
                        anchor=anchor, fetch=lambda i: next(store.read(i, i + 1)), tree=store.tree_node, run=run)
        if not report.valid:
            raise LedgerInvalid(report)
        steward = cls(store, key, report, folder.state, folder, run)
        steward._statements.update(map(_statement_key, statements))
        if loss is not None and (loss.length or not loss.unreadable):   # (an empty store: nothing to say)
            steward.commit([accepted(loss)])
        return steward

    @property
    def length(self) -> int:
        return self._length

    @property
    def head(self) -> bytes:
        return self._head

    def follow(self) -> int:
        """Verify and fold what another steward of a shared store appended since
        (a standby following its leader); the number of receipts it added.
        LedgerInvalid if the tail does not verify."""
        with self._lock:
            anchor = Anchor(self._length, self._head, self.ledger_id, self._witness)
            statements: list[bytes] = []
            report = verify(self._store.read(self._length), self._key.public,
                            on_entry=_noting(statements, self._folder),
                            workers=1, anchor=anchor, fetch=lambda i: next(self._store.read(i, i + 1)),
                            tree=self._store.tree_node, run=self._run)
            if not report.valid:
                raise LedgerInvalid(report)
            self._statements.update(map(_statement_key, statements))
            added = report.length - self._length
            with self._sign_lock:
                self._length, self._head = report.length, report.head
                self._signed_length, self._signed_head = self._length, self._head
            if report.witnessed_length > (self._witness.length if self._witness else 0):
                self._witness = WitnessSeen(report.witness.key_id, report.witnessed_length, None)
            self.state = self._folder.state if self._folder else self.state
            at = self._store.latest(COSIGNED) if added else None
            if at is not None:
                self._note_cosigned(next(self._store.read(at, at + 1)))
        return added

    def since_checkpoint(self) -> int:
        """Receipts after the last checkpoint receipt (all of them if there is
        none): where a checkpoint cadence resumes, whichever process wrote it."""
        at = self._store.latest(CHECKPOINT)
        return self._length if at is None else self._length - (at + 1)

    def info(self) -> LedgerInfo:
        seen = self._witness
        return LedgerInfo(self.ledger_id, self._length, self._head, self._key.public.key_id,
                          seen.length if seen else 0, seen.key_id if seen else None)

    def read(self, start: int = 0, stop: int | None = None) -> Iterator[bytes]:
        return self._store.read(start, stop)

    def commit(self, batch: Sequence[Prepared]) -> list[Receipt]:
        """Sign the batch in order and store it in one durable transaction."""
        made = self.sign(batch)
        self.store(made)
        return made

    def sign(self, batch: Sequence[Prepared]) -> list[Receipt]:
        """Sign the batch after everything signed so far, stored or not: group
        commit signs the next batch while the previous one is being stored."""
        with self._sign_lock:
            seq, prev, made = self._signed_length, self._signed_head, []
            for kind, body, time_ns, actor in batch:
                receipt = receipts.make(self._key, seq, prev,
                                        time.time_ns() if time_ns is None else time_ns, kind, body, actor)
                made.append(receipt)
                seq, prev = seq + 1, receipt.hash
            self._signed_length, self._signed_head = seq, prev
        return made

    def store(self, made: Sequence[Receipt]) -> None:
        """Store signed receipts in one durable transaction. They must follow the
        stored ones exactly: after a failed store, what was signed on top of it
        is refused, and signing starts again from the stored head."""
        with self._lock:
            try:
                if made[0].entry.seq != self._length:
                    raise StoreError(f"receipt {made[0].entry.seq} does not follow the stored {self._length}")
                self._store.append(self._length, [(r.entry.kind, r.raw) for r in made],
                                   [(claim, r.entry.seq) for r in made if (claim := claim_of(r.entry.body))])
            except BaseException:
                with self._sign_lock:
                    self._signed_length, self._signed_head = self._length, self._head
                raise
            self._length, self._head = made[-1].entry.seq + 1, made[-1].hash
        for receipt in made:
            if receipt.entry.kind == WITNESS:
                self._note_witness(receipt.entry.body["statement"])
            elif receipt.entry.kind == COSIGNED:
                self.cosigned = note.read_note(receipt.entry.body["note"])

    def append(self, kind: str, body: dict, time_ns: int | None = None) -> Receipt:
        return self.commit([prepare(kind, body, time_ns)])[0]

    def record_witness(self, statement: bytes) -> Receipt | None:
        """Append a witness's statement about this ledger (None: it is in already)."""
        item = self.prepare_witness(statement)
        return None if item is None else self.commit([item])[0]

    def prepare_witness(self, statement: bytes, trusted: Collection[PublicKey] | None = None,
                        actor: str | None = None) -> Prepared | None:
        """A witness's statement, checked (WitnessRejected if it is malformed, by
        the steward's key, by a key not in `trusted` when that is given, or about
        other receipts than these) and ready to append; None when the ledger
        already has (or is about to have) this witness's statement about this
        length: one receipt per statement, so a witness may send one again."""
        seen = witness.read_statement(statement)
        if trusted is not None:
            witness.check_trusted(seen, trusted)
        with self._lock:
            witness.check(seen, self._key.public, self.ledger_id, self._length,
                          lambda i: receipts.digest(next(self._store.read(i, i + 1))))
            key = (seen.witness.key_id, seen.length)
            if key in self._statements:
                return None
            self._statements.add(key)
        return prepare(WITNESS, {"statement": statement}, internal=True, actor=actor)

    def _note_witness(self, statement: bytes) -> None:
        seen = witness.read_statement(statement)
        if self._witness is None or seen.length > self._witness.length:
            self._witness = WitnessSeen(seen.witness.key_id, seen.length, None)

    def checkpoint(self, snapshot: Any) -> Receipt:
        """Sign the caller's state snapshot at this point (see docs/LEDGER.md);
        the checkpoint receipt, after its chunks."""
        return self.commit(list(self.prepare_checkpoint(snapshot, self._signed_length)))[-1]

    def prepare_checkpoint(self, snapshot: Any, first_seq: int) -> CheckpointPieces:
        """A checkpoint of `snapshot`, the state after the receipts before
        `first_seq`, where its first chunk is to be appended: its chunks, then
        the checkpoint receipt (docs/LEDGER.md §9), in this order, with other
        receipts between them or not."""
        seen = self._witness
        return CheckpointPieces(dcbor.encode(snapshot, limit=None), first_seq,
                          seen.length if seen else 0, seen.key_id if seen else None)

    # -- the Merkle tree (merkle.py, index.py) -------------------------------

    @property
    def proofs(self) -> merkle.Proofs:
        """Roots and proofs over the stored tree, which covers every stored receipt."""
        return merkle.Proofs(self._store.tree_node, getattr(self._store, "tree_nodes", None))

    def root(self, size: int | None = None) -> bytes:
        """MTH over the first `size` receipts (default: all stored)."""
        size = self._length if size is None else size
        if not 0 <= size <= self._length:
            raise ValueError(f"the ledger has {self._length} receipts, not {size}")
        return self.proofs.root(0, size)

    @property
    def steward_key(self) -> PublicKey:
        return self._key.public

    @property
    def origin(self) -> str:
        """The checkpoints' origin line, and the steward's key name in their notes."""
        return note.origin_for(self.ledger_id)

    def signed_checkpoint(self, size: int | None = None) -> note.Note:
        """A C2SP checkpoint of the first `size` receipts (default: all stored),
        signed by the steward: free to make, so made whenever asked."""
        size = self._length if size is None else size
        body = note.Checkpoint(self.origin, size, self.root(size)).body()
        return note.sign(body, self.origin, self._key)

    def prepare_cosigned(self, raw: bytes, trusted: Collection[note.VKey], actor: str | None = None) -> Prepared:
        """A checkpoint note back from witnesses, checked (WitnessRejected: it is
        not this ledger's checkpoint as the steward signed it, or no trusted
        witness cosigned it) and ready to append as a `cosigned_checkpoint`."""
        try:
            read = note.read_note(raw)
            checkpoint = note.read_checkpoint(read.body)
        except note.NoteError as exc:
            raise witness.WitnessRejected("malformed", f"checkpoint note: {exc}") from None
        if checkpoint.origin != self.origin:
            raise witness.WitnessRejected("other_ledger", f"origin {checkpoint.origin!r} is not {self.origin!r}")
        if not note.signed_by(read, self.origin, self._key.public):
            raise witness.WitnessRejected("signature", "the note has no good signature by the steward's key")
        if not 1 <= checkpoint.size <= self._length:
            raise witness.WitnessRejected("beyond_length",
                                          f"checkpoint size {checkpoint.size} is not within 1..{self._length}")
        if self.root(checkpoint.size) != checkpoint.root:
            raise witness.WitnessRejected("head_mismatch", f"the root is not this ledger's at {checkpoint.size}")
        if not any(note.cosigned_by(read, v.name, v.key) is not None for v in trusted if v.kind == note.COSIGNATURE_V1):
            raise witness.WitnessRejected("untrusted_key", "no cosignature by a trusted witness "
                                                           "([ledger] witness_keys, as vkeys)")
        return prepare(COSIGNED, {"note": raw}, internal=True, actor=actor)

    def _note_cosigned(self, raw: bytes) -> None:
        try:
            entry, _ = receipts.read_core(cose.parse_whole(raw).payload)
            self.cosigned = note.read_note(entry.body["note"])
        except (dcbor.DcborError, receipts.ReceiptError, note.NoteError, KeyError):
            self.cosigned = None   # verified on open: not reached for a bad one

    def claim_seqs(self, claim: str) -> list[int]:
        """The seqs of the receipts that name `claim` (index.py), in order."""
        return [seq for seq in self._store.claim_seqs(claim) if seq < self._length]

    def close(self) -> None:
        self._store.close()


def _noting(statements: list[bytes], folder: Folder | None):
    """An on_entry that folds (with a folder), and notes each witness statement it passes."""
    def on_entry(entry) -> None:
        if entry.kind == WITNESS:
            statements.append(entry.body["statement"])
        if folder is not None:
            folder(entry)
    return on_entry


def _statement_key(statement: bytes) -> tuple[bytes, int]:
    seen = witness.read_statement(statement)
    return seen.witness.key_id, seen.length


def _checkpoint_anchor(store: Store, key: SigningKey, folder: Folder) -> Anchor | None:
    """Where to resume: the first chunk of the last checkpoint, if the fold can
    restore and the genesis verifies. The chunks and the checkpoint receipt are
    verified with the tail."""
    at = store.latest(CHECKPOINT) if folder.fold.restore else None
    if at is None:
        return None
    genesis = verify(store.read(0, 1), key.public, workers=1)
    if not genesis.valid:
        raise LedgerInvalid(genesis)
    try:
        entry, prev = receipts.read_core(cose.parse_whole(next(store.read(at, at + 1))).payload)
        body = entry.body
        if entry.kind != CHECKPOINT or entry.seq != at or bodies.checkpoint(entry) is not None:
            return None     # the full verification will say what is wrong with it
        if "state" not in body:   # chunked ("state": the first format, inline): resume from its first chunk
            at = body.get("first_chunk", at - body["chunks"])   # without it (the second format): right before
            _, prev = receipts.read_core(cose.parse_whole(next(store.read(at, at + 1))).payload)
    except (dcbor.DcborError, receipts.ReceiptError):
        return None     # the full verification will say what is wrong with it
    witnessed = body.get("witnessed_length", 0)
    seen = WitnessSeen(body.get("witness_key_id") or b"", witnessed, None) if witnessed else None
    folder.resuming = True
    return Anchor(at, prev, genesis.ledger_id, seen)


def open_ledger(path: str | Path, key: SigningKey, fold: Fold | None = None, *,
                accept_loss: bool = False) -> Steward:
    """The embedded default: a SQLite store at path, created if absent."""
    store = SqliteStore(path, create=True)
    try:
        return Steward.open(store, key, fold, accept_loss=accept_loss)
    except BaseException:
        store.close()
        raise
