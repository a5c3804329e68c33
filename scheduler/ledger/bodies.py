"""What the ledger's own kinds mean: the shape of each body, as data, checked
for every receipt by verify (reason `body`, docs/LEDGER.md §4 and §6).

One function per kind, each returning None or what is wrong, and
`CheckpointRun`, the one check that needs the receipts around it (a
checkpoint's chunks come before it, from its `first_chunk` on). Everything about the checkpoint
format is in `checkpoint`, `checkpoint_chunk` and `CheckpointRun`: a new format
changes those and nothing else. A caller's own kinds are checked by the
caller's `BodyCheck`, given to verify (the scheduler's:
scheduler/service/bodies.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from scheduler.ledger import note, witness
from scheduler.ledger.receipts import CHECKPOINT, CHECKPOINT_CHUNK, COSIGNED, GENESIS, LOSS_ACCEPTED, WITNESS, Entry

CHUNK_LIMIT = 4 << 20   # the most state bytes one checkpoint_chunk may carry (the steward writes CHUNK_BYTES)
CHUNKED = frozenset({"chunks", "size", "digest", "witnessed_length", "witness_key_id"})   # and first_chunk

# (kind, body) -> None when the body has its kind's documented shape, else why not
BodyCheck = Callable[[str, dict], "str | None"]


def _natural(value: Any) -> bool:
    return type(value) is int and value >= 0


def _bytes(value: Any, size: int) -> bool:
    return type(value) is bytes and len(value) == size


def _fields(body: dict, names: set[str]) -> str | None:
    if set(body) != names:
        return f"the fields are {sorted(body)}, not {sorted(names)}"
    return None


def genesis(entry: Entry) -> str | None:
    if entry.seq != 0:
        return f"a genesis at seq {entry.seq}: only receipt 0 is a genesis"
    return None   # receipt 0's body is checked with the key it names (reason `profile`)


def witness_body(entry: Entry) -> str | None:
    body = entry.body
    wrong = _fields(body, {"statement"})
    if wrong or type(body["statement"]) is not bytes:
        return wrong or "statement is not a byte string"
    try:
        witness.read_statement(body["statement"])
    except witness.WitnessRejected as exc:
        if exc.code == "malformed":
            return f"statement: {exc}"
    return None   # a statement that reads but does not hold only lowers the grade (§8)


def checkpoint(entry: Entry) -> str | None:
    body = entry.body
    if "state" in body:   # the first format: the state inline, no chunks
        wrong = _fields(body, {"state", "witnessed_length", "witness_key_id"})
    else:   # chunked; without first_chunk (the second format) its chunks lie right before it
        wrong = _fields(body, CHUNKED | ({"first_chunk"} & set(body)))
        if not wrong and not (_natural(body["chunks"]) and 1 <= body["chunks"] <= entry.seq
                              and _natural(body["size"]) and _bytes(body["digest"], 32)):
            wrong = "chunks is not 1 up to its seq, size not a count, or digest not 32 bytes"
        if not wrong and "first_chunk" in body and not (
                _natural(body["first_chunk"]) and 1 <= body["first_chunk"] <= entry.seq - body["chunks"]):
            wrong = f"first_chunk {body['first_chunk']!r} is not a seq with its {body['chunks']} chunks before it"
    if wrong:
        return wrong
    length, key_id = body["witnessed_length"], body["witness_key_id"]
    if not _natural(length) or length > entry.seq:
        return f"witnessed_length {length!r} is not a count of the receipts before it"
    if not ((length == 0 and key_id is None) or (length > 0 and _bytes(key_id, 16))):
        return "witness_key_id is not 16 bytes with a witnessed length, and null without"
    return None


def checkpoint_chunk(entry: Entry) -> str | None:
    body = entry.body
    wrong = _fields(body, {"index", "data"})
    if wrong:
        return wrong
    if not _natural(body["index"]) or type(body["data"]) is not bytes or len(body["data"]) > CHUNK_LIMIT:
        return f"index is not a count, or data not a byte string of at most {CHUNK_LIMIT} bytes"
    return None


class CheckpointRun:
    """The chunks of the checkpoint being written: a chunk with index 0 starts a
    run, each next chunk has the next index, and other receipts may lie between
    them (the steward writes a checkpoint's chunks among the receipts that come
    after the state it holds). A checkpoint closes the run: it must have exactly
    the run's chunks, from its `first_chunk` (right before it, in the second
    format), whose data add up to its size and SHA-256 (LEDGER.md §9). A run
    nobody closes (a crash before its checkpoint) is not a fault; the next
    chunk 0 starts over."""

    def __init__(self) -> None:
        self._start(None)

    def _start(self, first: int | None) -> None:
        self.first, self.count, self.size, self.hash = first, 0, 0, hashlib.sha256()

    def wrong(self, entry: Entry) -> str | None:
        """Why this entry (shape already checked) breaks the run, or None."""
        if entry.kind == CHECKPOINT_CHUNK:
            index, data = entry.body["index"], entry.body["data"]
            if index == 0:
                self._start(entry.seq)
            elif index != self.count:
                wrong = f"{CHECKPOINT_CHUNK}: index {index} follows {self.count} chunks"
                self._start(None)
                return wrong
            self.count, self.size = self.count + 1, self.size + len(data)
            self.hash.update(data)
            return None
        if entry.kind != CHECKPOINT:
            return None
        first, count, size, digest = self.first, self.count, self.size, self.hash.digest()
        self._start(None)
        body = entry.body
        if "state" in body:
            return None
        if body["chunks"] != count:
            return f"{CHECKPOINT}: {body['chunks']} chunks signed, {count} in the run before it"
        if first != body.get("first_chunk", entry.seq - count):
            where = f"from seq {body['first_chunk']}" if "first_chunk" in body else "right before it"
            return f"{CHECKPOINT}: its chunks begin at seq {first}, not {where}"
        if body["size"] != size or body["digest"] != digest:
            return f"{CHECKPOINT}: its chunks' {size} bytes are not the size and SHA-256 it signs"
        return None


def loss_accepted(entry: Entry) -> str | None:
    body = entry.body
    wrong = _fields(body, {"recorded_length", "recorded_head", "length"})
    if wrong:
        return wrong
    if not (_natural(body["recorded_length"]) and body["recorded_length"] > 0
            and _bytes(body["recorded_head"], 32)):
        return "recorded_length is not a positive count, or recorded_head not 32 bytes"
    if not _natural(body["length"]) or body["length"] > entry.seq:
        return f"length {body['length']!r} is not a count of the receipts before it"
    return None


def cosigned(entry: Entry) -> str | None:
    """A C2SP checkpoint note of at most the receipts before it. Its steward
    signature and its root are checked against the ledger by verify (they need
    the key and the tree), its cosignatures by whoever trusts their keys."""
    body = entry.body
    wrong = _fields(body, {"note"})
    if wrong or type(body["note"]) is not bytes:
        return wrong or "note is not a byte string"
    try:
        size = note.read_checkpoint(note.read_note(body["note"]).body).size
    except note.NoteError as exc:
        return f"note: {exc}"
    if not 1 <= size <= entry.seq:
        return f"the checkpoint's size {size} is not within 1..{entry.seq}, the receipts before it"
    return None


LEDGER_SHAPES: dict[str, Callable[[Entry], str | None]] = {
    GENESIS: genesis, WITNESS: witness_body, CHECKPOINT: checkpoint, CHECKPOINT_CHUNK: checkpoint_chunk,
    LOSS_ACCEPTED: loss_accepted, COSIGNED: cosigned}


def wrong_body(entry: Entry, caller: BodyCheck | None) -> str | None:
    """Why this entry's body is not its kind's shape (the ledger's, then the caller's), or None."""
    shape = LEDGER_SHAPES.get(entry.kind)
    wrong = shape(entry) if shape else None
    if wrong is None and caller is not None:
        wrong = caller(entry.kind, entry.body)
    return None if wrong is None else f"{entry.kind}: {wrong}"
