"""Verification of a receipt stream: signatures and chain, checked and reported
separately, and the stream refused at its first broken entry with one reason.

Per entry, in this order (the first failure is the entry's reason):
  decode         not the COSE_Sign1 layout, or a core outside the det-CBOR subset
  non_canonical  a core that parses but does not re-encode to the same bytes
  signature      no steward key, a foreign key id, or an Ed25519 failure
  profile        not a pool/1 core (fields, types, profile); receipt 0 not a genesis
  chain          prev is not the SHA-256 of the previous receipt's bytes
  sequence       seq is not the entry's index
Signatures are checked in worker processes for long streams: the chain is one
sequential pass, the Ed25519 checks are independent of each other.
"""

from __future__ import annotations

import collections
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

from scheduler.ledger import cose, witness
from scheduler.ledger.dcbor import DcborError
from scheduler.ledger.keys import PublicKey
from scheduler.ledger.receipts import (GENESIS, WITNESS, ZERO_HASH, Entry, ReceiptError, digest,
                                       read_core)

REASONS = ("decode", "non_canonical", "signature", "chain", "sequence", "profile")
_ENTRY_ORDER = ("decode", "non_canonical", "signature", "profile", "chain", "sequence")
_BATCH = 2048                  # signatures per job sent to a worker
_PARALLEL_FROM = 4 * _BATCH    # shorter streams are checked in-process


class WitnessSeen(NamedTuple):
    key_id: bytes
    length: int
    problem: str | None        # a WitnessRejected code; None when it holds


@dataclass(frozen=True)
class Report:
    valid: bool
    length: int                # receipts in the verified prefix (all of them when valid)
    head: bytes                # SHA-256 of the last receipt of that prefix
    signatures_ok: bool
    chain_ok: bool
    first_bad_index: int | None
    reason: str | None
    detail: str
    witnessed_length: int
    witness: WitnessSeen | None
    ledger_id: bytes | None
    steward: PublicKey | None

    @property
    def grade(self) -> str:
        return "witnessed" if self.witnessed_length else "self-attested"

    def document(self) -> dict:
        seen = self.witness
        return {
            "valid": self.valid, "length": self.length, "head": self.head.hex(),
            "signatures_ok": self.signatures_ok, "chain_ok": self.chain_ok,
            "first_bad_index": self.first_bad_index, "reason": self.reason,
            "grade": self.grade, "witnessed_length": self.witnessed_length,
            "witness": None if seen is None else {"key_id": seen.key_id.hex(),
                                                  "length": seen.length, "problem": seen.problem},
        }


class LedgerInvalid(Exception):
    def __init__(self, report: Report) -> None:
        super().__init__(f"receipt {report.first_bad_index}: {report.reason}: {report.detail}")
        self.report = report


class Anchor(NamedTuple):
    """A verified point to resume from (a checkpoint): the next index and its prev."""
    index: int
    prev: bytes
    ledger_id: bytes
    witnessed: WitnessSeen | None


class Verifier:
    """Feed receipts in order; every check but Ed25519 happens in `feed`, which
    returns the signature job for the caller to run here or in a worker."""

    def __init__(self, key: PublicKey | None = None, anchor: Anchor | None = None,
                 fetch: Callable[[int], bytes] | None = None) -> None:
        self.key = key
        self.index = anchor.index if anchor else 0
        self._base = self.index
        self._prev = anchor.prev if anchor else ZERO_HASH
        self.ledger_id = anchor.ledger_id if anchor else None
        self._fetch = fetch
        self._hashes = bytearray()
        self._first_bad: tuple[int, int, str, str] | None = None
        self.signatures_ok = self.chain_ok = True
        self.stopped = False
        self._witnesses: list[tuple[int, WitnessSeen]] = []
        if anchor and anchor.witnessed:
            self._witnesses.append((anchor.index - 1, anchor.witnessed))

    def fail(self, index: int, reason: str, detail: str) -> None:
        if reason == "signature":
            self.signatures_ok = False
        else:       # a core that cannot be read cannot be linked either
            self.chain_ok = False
        mark = (index, _ENTRY_ORDER.index(reason), reason, detail)
        if self._first_bad is None or mark < self._first_bad:
            self._first_bad = mark

    def hash_at(self, index: int) -> bytes:
        if index >= self._base:
            at = 32 * (index - self._base)
            return bytes(self._hashes[at:at + 32])
        if self._fetch is None:
            raise LookupError(f"receipt {index} is before this verification's anchor")
        return digest(self._fetch(index))

    def feed(self, raw: bytes) -> tuple[Entry | None, tuple[int, bytes, bytes] | None]:
        """(the entry, if nothing is wrong up to it; the signature job, if any)."""
        i = self.index
        self.index += 1
        try:
            message = cose.parse_whole(raw)
        except DcborError as exc:
            self.fail(i, exc.reason, f"envelope: {exc}")
            self.signatures_ok = False
            self.stopped = True      # in an export the next receipt's start is lost too
            return None, None
        this = digest(raw)
        self._hashes += this
        entry, prev = self._read(i, message, this)
        job = self._signature_job(i, message)
        if entry is not None:
            self._link(i, entry, prev)
        self._prev = this
        if self._first_bad is not None and self._first_bad[0] <= i:
            return None, job
        if entry.kind == WITNESS:
            self._record_witness(i, entry.body.get("statement"))
        return entry, job

    def _read(self, i: int, message: cose.Sign1, this: bytes) -> tuple[Entry | None, bytes]:
        try:
            entry, prev = read_core(message.payload)
        except ReceiptError as exc:
            self.fail(i, exc.reason, str(exc))
            return None, b""
        if i == 0:
            self._genesis(entry, this)
        return entry, prev

    def _genesis(self, entry: Entry, this: bytes) -> None:
        self.ledger_id = this
        raw_key = entry.body.get("steward_key") if entry.kind == GENESIS else None
        if type(raw_key) is not bytes or len(raw_key) != 32 or len(entry.body) != 1:
            self.fail(0, "profile", "receipt 0 is not a genesis naming the steward key")
            return
        named = PublicKey(raw_key)
        if self.key is None:
            self.key = named
        elif named != self.key:
            self.fail(0, "signature", "the genesis names another steward key")

    def _signature_job(self, i: int, message: cose.Sign1) -> tuple[int, bytes, bytes] | None:
        if self.key is None:    # no --key and no readable genesis: that failure is at 0
            self.signatures_ok = False
        elif message.key_id != self.key.key_id:
            self.fail(i, "signature", f"key id {message.key_id.hex()} is not the steward's")
        else:
            return i, message.to_be_signed(), message.signature
        return None

    def _link(self, i: int, entry: Entry, prev: bytes) -> None:
        if prev != self._prev:
            self.fail(i, "chain", "prev is not the hash of the previous receipt")
        elif entry.seq != i:
            self.fail(i, "sequence", f"seq {entry.seq} at index {i}")

    def _record_witness(self, at: int, statement: object) -> None:
        self._witnesses.append((at, self._witness(statement, at)))

    def _witness(self, statement: object, length: int) -> WitnessSeen:
        try:
            if type(statement) is not bytes:
                raise witness.WitnessRejected("malformed", "a witness receipt without a statement")
            seen = witness.read_statement(statement)
        except witness.WitnessRejected as exc:
            return WitnessSeen(b"", 0, exc.code)
        try:
            witness.check(seen, self.key, self.ledger_id, length, self.hash_at)
            problem = None
        except witness.WitnessRejected as exc:
            problem = exc.code
        return WitnessSeen(seen.witness.key_id, seen.length, problem)

    def signatures_failed(self, indices: Iterable[int]) -> None:
        for i in indices:
            self.fail(i, "signature", "the Ed25519 signature does not verify")

    def report(self, witness_files: Iterable[bytes] = ()) -> Report:
        if self.index == self._base == 0 and self._first_bad is None:
            self.fail(0, "decode", "empty: no genesis receipt")
        bad = self._first_bad
        length = bad[0] if bad else self.index
        for statement in witness_files:
            self._witnesses.append((-1, self._witness(statement, length)))
        holding = [w for at, w in self._witnesses if at < length and w.problem is None]
        shown = max(holding, key=lambda w: w.length, default=None)
        if shown is None and self._witnesses:
            shown = self._witnesses[-1][1]
        return Report(
            valid=bad is None, length=length,
            head=self.hash_at(length - 1) if length else ZERO_HASH,
            signatures_ok=self.signatures_ok, chain_ok=self.chain_ok,
            first_bad_index=bad[0] if bad else None, reason=bad[2] if bad else None,
            detail=bad[3] if bad else "every receipt verifies",
            witnessed_length=max((w.length for w in holding), default=0), witness=shown,
            ledger_id=self.ledger_id, steward=self.key)


def _bad_signatures(raw_key: bytes, jobs: list[tuple[int, bytes, bytes]]) -> list[int]:
    key = PublicKey(raw_key)
    return [i for i, message, signature in jobs if not key.verifies(signature, message)]


def _batches(items: Iterable[bytes]) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    for item in items:
        batch.append(item)
        if len(batch) == _BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def verify(receipts: Iterable[bytes], key: PublicKey | None = None, *,
           witness_files: Iterable[bytes] = (), on_entry: Callable[[Entry], None] | None = None,
           workers: int | None = None, anchor: Anchor | None = None,
           fetch: Callable[[int], bytes] | None = None) -> Report:
    """Verify a stream; `on_entry` sees each entry in order until the first fault
    found outside Ed25519. Without `key`, the genesis receipt names the steward."""
    workers = (os.cpu_count() or 1) if workers is None else workers
    verifier = Verifier(key, anchor, fetch)
    pool: ProcessPoolExecutor | None = None
    pending: collections.deque = collections.deque()
    try:
        for batch in _batches(receipts):
            jobs = []
            for raw in batch:
                entry, job = verifier.feed(raw)
                if job:
                    jobs.append(job)
                if entry is not None and on_entry is not None:
                    on_entry(entry)
                if verifier.stopped:
                    break
            if pool is None and workers > 1 and verifier.index >= _PARALLEL_FROM:
                pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("forkserver"))
            if jobs and pool is not None:
                pending.append(pool.submit(_bad_signatures, verifier.key.raw, jobs))
            elif jobs:
                verifier.signatures_failed(_bad_signatures(verifier.key.raw, jobs))
            while len(pending) > workers:
                verifier.signatures_failed(pending.popleft().result())
            if verifier.stopped:
                break
        while pending:
            verifier.signatures_failed(pending.popleft().result())
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return verifier.report(witness_files)
