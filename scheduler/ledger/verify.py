"""Verification of a receipt stream: signatures and chain, checked and reported
separately, and the stream refused at its first broken entry with one reason.

Per entry, in this order (the first failure is the entry's reason):
  decode         not the COSE_Sign1 layout, or a core outside the det-CBOR subset
  non_canonical  an envelope or core in the subset but not in its shortest form
  signature      no steward key, a foreign key id, or an Ed25519 failure
  profile        not a pool/1 core (fields, types, profile); receipt 0 not a genesis
  chain          prev is not the SHA-256 of the previous receipt's bytes
  sequence       seq is not the entry's index
  body           the body is not its kind's documented shape (bodies.py), e.g. a
                 genesis after receipt 0, a witness without a readable statement
signatures_ok is false once a receipt's signature fails or cannot be checked
(an envelope that does not parse, no steward key); chain_ok once a core cannot
be read (decode, non_canonical, profile) or does not link. A `body` failure
leaves both true: the receipt is the steward's and in its place, and wrong.
For long streams each receipt's own checks (envelope, core, Ed25519) run in
worker processes; the chain, which needs the order, is one pass in this one.
"""

from __future__ import annotations

import collections
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

from scheduler.ledger import cose, merkle, note, witness
from scheduler.ledger.bodies import BodyCheck, CheckpointRun, wrong_body
from scheduler.ledger.dcbor import DcborError
from scheduler.ledger.keys import PublicKey
from scheduler.ledger.receipts import (COSIGNED, GENESIS, LEDGER_KINDS, WITNESS, ZERO_HASH, Entry, ReceiptError,
                                       digest, read_core)

REASONS = ("decode", "non_canonical", "signature", "chain", "sequence", "profile", "body")
_ENTRY_ORDER = ("decode", "non_canonical", "signature", "profile", "chain", "sequence", "body")
_READ_OR_LINK = frozenset({"decode", "non_canonical", "profile", "chain", "sequence"})   # chain_ok's
_BATCH = 1024                  # receipts per job sent to a worker
_PARALLEL_FROM = 2 * _BATCH    # shorter streams are checked in-process


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
    root: bytes = merkle.EMPTY_ROOT   # RFC 9162 root over the verified prefix, rebuilt from its receipts

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
            "root": self.root.hex(),
            "tail": "not checked: without --witness-key a tail cut at a receipt boundary is a shorter valid ledger",
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


class Examined(NamedTuple):
    """What one receipt shows on its own (the chain needs its neighbours)."""
    hash: bytes | None              # None: the envelope does not parse, the stream stops
    entry: Entry | None
    prev: bytes
    faults: tuple[tuple[str, str], ...]   # (reason, detail)
    leaf: bytes = b""               # its Merkle leaf hash


def examine(raw: bytes, key: PublicKey | None, bodies: BodyCheck | None = None) -> Examined:
    """Envelope, core, (with a key) signature and body shape of one receipt."""
    try:
        message = cose.parse_whole(raw)
    except DcborError as exc:
        return Examined(None, None, b"", ((exc.reason, f"envelope: {exc}"),))
    faults = []
    try:
        entry, prev = read_core(message.payload)
    except ReceiptError as exc:
        entry, prev = None, b""
        faults.append((exc.reason, str(exc)))
    else:
        wrong = wrong_body(entry, bodies)
        if wrong is not None:
            faults.append(("body", wrong))
    if key is not None and message.key_id != key.key_id:
        faults.append(("signature", f"key id {message.key_id.hex()} is not the steward's"))
    elif key is not None and not key.verifies(message.signature, message.to_be_signed()):
        faults.append(("signature", "the Ed25519 signature does not verify"))
    return Examined(digest(raw), entry, prev, tuple(faults), merkle.leaf_hash(raw))


def _examine_batch(raw_key: bytes | None, batch: list[bytes], bodies: bool,
                   check: BodyCheck | None, keep: frozenset[str] = frozenset()) -> list[Examined]:
    """In a worker. Without `bodies` (nobody folds) only the bodies of the
    ledger's own kinds and of `keep` travel back (the checks that need the
    sequence read them)."""
    key = PublicKey(raw_key) if raw_key else None
    examined = [examine(raw, key, check) for raw in batch]
    if bodies:
        return examined
    return [e if e.entry is None or e.entry.kind in LEDGER_KINDS or e.entry.kind in keep
            else e._replace(entry=e.entry._replace(body={})) for e in examined]


class Sequential:
    """A caller's check of its kinds that needs the receipts before (e.g. that
    a device's windows do not overlap): `wrong(entry)` is called in order for
    every entry of `kinds` whose body has its shape, and says why it is wrong."""
    kinds: frozenset[str] = frozenset()

    def wrong(self, entry: Entry) -> str | None:
        return None


def _named_key(entry: Entry | None) -> PublicKey | None:
    """The steward key a genesis entry names, if it is one."""
    if entry is None or entry.kind != GENESIS or set(entry.body) != {"steward_key"}:
        return None
    raw = entry.body["steward_key"]
    return PublicKey(raw) if type(raw) is bytes and len(raw) == 32 else None


class Verifier:
    """Accepts examined receipts in order and does what needs the sequence:
    the chain, the seq, the genesis, the witnesses, the first failure."""

    def __init__(self, key: PublicKey | None = None, anchor: Anchor | None = None,
                 fetch: Callable[[int], bytes] | None = None, bodies: BodyCheck | None = None,
                 tree: merkle.Node | None = None, follows: Sequential | None = None,
                 run: CheckpointRun | None = None) -> None:
        self.key = key
        self.bodies = bodies
        self.follows = follows or Sequential()
        self._run = run or CheckpointRun()
        self.index = anchor.index if anchor else 0
        self.start = self.index
        self._prev = anchor.prev if anchor else ZERO_HASH
        self.ledger_id = anchor.ledger_id if anchor else None
        self._fetch = fetch
        self._hashes = bytearray()
        self._leaves = bytearray()
        self._tree = tree              # the stored tree, for the nodes before an anchor
        self._nodes: dict[tuple[int, int], bytes] = {}
        self._first_bad: tuple[int, int, str, str] | None = None
        self.signatures_ok = self.chain_ok = True
        self.stopped = False
        self._witnesses: list[tuple[int, WitnessSeen]] = []
        if anchor and anchor.witnessed:
            self._witnesses.append((anchor.index - 1, anchor.witnessed))

    def fail(self, index: int, reason: str, detail: str) -> None:
        if reason == "signature":
            self.signatures_ok = False
        elif reason in _READ_OR_LINK:   # a core that cannot be read cannot be linked either
            self.chain_ok = False
        mark = (index, _ENTRY_ORDER.index(reason), reason, detail)
        if self._first_bad is None or mark < self._first_bad:
            self._first_bad = mark

    def hash_at(self, index: int) -> bytes:
        if index >= self.start:
            at = 32 * (index - self.start)
            return bytes(self._hashes[at:at + 32])
        if self._fetch is None:
            raise LookupError(f"receipt {index} is before this verification's anchor")
        return digest(self._fetch(index))

    _CACHED_FROM = 6   # levels whose nodes are kept once computed (64 leaves and up)

    def node(self, level: int, index: int) -> bytes:
        """A complete subtree's hash, rebuilt from the leaves seen (the stored
        tree's, before an anchor)."""
        if (index + 1) << level <= self.start:
            if self._tree is None:
                raise LookupError(f"the tree before receipt {self.start} is not known here")
            return self._tree(level, index)
        if level == 0:
            at = 32 * (index - self.start)
            return bytes(self._leaves[at:at + 32])
        cached = self._nodes.get((level, index))
        if cached is None:
            cached = merkle.node_hash(self.node(level - 1, 2 * index), self.node(level - 1, 2 * index + 1))
            if level >= self._CACHED_FROM:
                self._nodes[level, index] = cached
        return cached

    def root(self, size: int) -> bytes:
        return merkle.Proofs(self.node).root(0, size)

    def _cosigned(self, i: int, raw: bytes) -> str | None:
        """Why a cosigned checkpoint at i is not the steward's checkpoint of this ledger, or None."""
        read = note.read_note(raw)
        checkpoint = note.read_checkpoint(read.body)
        origin = note.origin_for(self.ledger_id)
        if checkpoint.origin != origin:
            return f"{COSIGNED}: origin {checkpoint.origin!r} is not this ledger's {origin!r}"
        if self.key is None or not note.signed_by(read, origin, self.key):
            return f"{COSIGNED}: the note has no good signature by the steward's key"
        try:
            root = self.root(checkpoint.size)
        except LookupError:
            return None   # before a resumed checkpoint: start-up trusts its stored tree only as far as it reads it
        if root != checkpoint.root:
            return f"{COSIGNED}: the root it signs is not the tree's over the first {checkpoint.size} receipts"
        return None

    def feed(self, raw: bytes) -> Entry | None:
        if self.index == 0 and self.key is None:   # the genesis names the steward
            self.key = _named_key(examine(raw, None).entry)
        return self.accept(examine(raw, self.key, self.bodies))

    def accept(self, examined: Examined) -> Entry | None:
        """The entry, if nothing is wrong up to and including it."""
        i = self.index
        self.index += 1
        for reason, detail in examined.faults:
            self.fail(i, reason, detail)
        if examined.hash is None:
            self.signatures_ok = False
            self.stopped = True      # in an export the next receipt's start is lost too
            return None
        if self.key is None:         # nothing to check signatures against (see receipt 0)
            self.signatures_ok = False
        self._hashes += examined.hash
        self._leaves += examined.leaf
        entry = examined.entry
        if i == 0:
            self._genesis(entry, examined.hash)
        if entry is not None:
            self._link(i, entry, examined.prev)
            if not examined.faults:
                wrong = self._run.wrong(entry)
                if wrong is None and entry.kind == COSIGNED:
                    wrong = self._cosigned(i, entry.body["note"])
                if wrong is None and entry.kind in self.follows.kinds:
                    wrong = self.follows.wrong(entry)
                if wrong is not None:
                    self.fail(i, "body", wrong)
        self._prev = examined.hash
        if self._first_bad is not None and self._first_bad[0] <= i:
            return None
        if entry.kind == WITNESS:   # its body has the shape (bodies.py): a statement
            self._witnesses.append((i, self._witness(entry.body["statement"], i)))
        return entry

    def _genesis(self, entry: Entry | None, this: bytes) -> None:
        self.ledger_id = this
        named = _named_key(entry)
        if named is None:
            self.fail(0, "profile", "receipt 0 is not a genesis naming the steward key")
        elif named != self.key:
            self.fail(0, "signature", "the genesis names another steward key")

    def _link(self, i: int, entry: Entry, prev: bytes) -> None:
        if prev != self._prev:
            self.fail(i, "chain", "prev is not the hash of the previous receipt")
        elif entry.seq != i:
            self.fail(i, "sequence", f"seq {entry.seq} at index {i}")

    def _witness(self, statement: bytes, length: int) -> WitnessSeen:
        try:
            seen = witness.read_statement(statement)
        except witness.WitnessRejected as exc:
            return WitnessSeen(b"", 0, exc.code)
        try:
            witness.check(seen, self.key, self.ledger_id, length, self.hash_at)
            problem = None
        except witness.WitnessRejected as exc:
            problem = exc.code
        return WitnessSeen(seen.witness.key_id, seen.length, problem)

    def report(self, witness_files: Iterable[bytes] = ()) -> Report:
        if self.index == self.start == 0 and self._first_bad is None:
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
            ledger_id=self.ledger_id, steward=self.key, root=self._prefix_root(length))

    def _prefix_root(self, length: int) -> bytes:
        try:
            return self.root(length)
        except LookupError:
            return b""   # resumed from an anchor without the stored tree: not rebuilt


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
           fetch: Callable[[int], bytes] | None = None, bodies: BodyCheck | None = None,
           tree: merkle.Node | None = None, follows: Sequential | None = None,
           run: CheckpointRun | None = None) -> Report:
    """Verify a stream; `on_entry` sees each entry in order until the first fault.
    Without `key`, the genesis receipt names the steward. The ledger's own kinds'
    bodies are always checked; `bodies` (a module-level function: it travels
    to the workers) checks the caller's. Past _PARALLEL_FROM receipts, each
    receipt's own checks run in `workers` processes. `run`: the checkpoint
    chunks seen so far, kept by a caller that verifies a ledger a tail at a
    time (a standby), since a checkpoint's chunks may span its tails."""
    workers = (os.cpu_count() or 1) if workers is None else workers
    verifier = Verifier(key, anchor, fetch, bodies, tree, follows, run)
    deliver = on_entry or (lambda entry: None)
    batches = _batches(receipts)
    for batch in batches:
        for raw in batch:
            entry = verifier.feed(raw)
            if entry is not None:
                deliver(entry)
            if verifier.stopped:
                return verifier.report(witness_files)
        if workers > 1 and verifier.index - verifier.start >= _PARALLEL_FROM:
            _in_parallel(verifier, batches, deliver, workers, bodies=on_entry is not None)
            break
    return verifier.report(witness_files)


def _in_parallel(verifier: Verifier, batches: Iterator[list[bytes]],
                 deliver: Callable[[Entry], None], workers: int, bodies: bool) -> None:
    raw_key = verifier.key.raw if verifier.key else None
    context = multiprocessing.get_context("forkserver")   # no fork of a threaded service
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        pending: collections.deque = collections.deque()
        try:
            for batch in batches:
                pending.append(pool.submit(_examine_batch, raw_key, batch, bodies, verifier.bodies,
                                           verifier.follows.kinds))
                if len(pending) > 2 * workers and not _accept(verifier, pending, deliver):
                    return
            while pending and _accept(verifier, pending, deliver):
                pass
        finally:
            for future in pending:
                future.cancel()


def _accept(verifier: Verifier, pending: collections.deque, deliver: Callable[[Entry], None]) -> bool:
    """Accept the oldest batch in order; False once the stream has stopped."""
    for examined in pending.popleft().result():
        entry = verifier.accept(examined)
        if entry is not None:
            deliver(entry)
        if verifier.stopped:
            return False
    return True
