"""Witness statements judged by trusted keys: what `poolctl ledger verify
--witness-key` adds to verification (docs/LEDGER.md §8).

A statement by a trusted key is evidence about the ledger: when it holds the
ledger is `witnessed` up to its length; when it contradicts the ledger the
ledger is invalid, whatever its own signatures say — a steward key can
re-sign a rewritten or shortened history, a witness's signature it cannot
forge:

- `history_rewritten`: receipt `length − 1` does not hash to the witnessed head;
- `history_cut`: the ledger has fewer receipts than the witnessed length.

Statements by other keys, about other ledgers, or that do not verify are
ignored here: they vouch for nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from scheduler.ledger import cose, dcbor, merkle, witness
from scheduler.ledger import note as note_format
from scheduler.ledger.keys import PublicKey
from scheduler.ledger.note import COSIGNATURE_V1, VKey
from scheduler.ledger.receipts import COSIGNED, WITNESS, Entry, digest
from scheduler.ledger.verify import Report, WitnessSeen, verify


class Contradiction(NamedTuple):
    reason: str        # history_rewritten | history_cut
    index: int         # the first receipt the statement and the ledger disagree on
    detail: str


class Judged(NamedTuple):
    report: Report
    witnessed_length: int               # the longest trusted statement that holds (0: none)
    witness_key_id: bytes | None        # whose
    contradiction: Contradiction | None
    shown: WitnessSeen | None = None    # the witness the report shows: the longest holding, else why one fails
    hashes: tuple[bytes, ...] = ()      # each receipt's SHA-256, as read
    leaves: tuple[bytes, ...] = ()      # each receipt's Merkle leaf hash, as read

    @property
    def first_bad(self) -> tuple[int, str] | None:
        """The earliest failure: the ledger's own, or a trusted statement's contradiction."""
        own = None if self.report.valid else (self.report.first_bad_index, self.report.reason)
        if self.contradiction is None:
            return own
        theirs = (self.contradiction.index, self.contradiction.reason)
        return theirs if own is None or theirs[0] < own[0] else own

    def document(self) -> dict:
        doc = self.report.document()
        doc["grade"] = "witnessed" if self.witnessed_length else "self-attested"
        doc["witnessed_length"] = self.witnessed_length
        doc["witness"] = None if self.shown is None else {
            "key_id": self.shown.key_id.hex(), "length": self.shown.length, "problem": self.shown.problem}
        bad = self.first_bad
        if bad is not None and bad[1] in ("history_rewritten", "history_cut"):
            length = bad[0]
            doc.update(valid=False, first_bad_index=length, reason=bad[1], length=length,
                       head=(self.hashes[length - 1] if length else bytes(32)).hex(),
                       root=merkle.root_of(list(self.leaves[:length])).hex())
        holding = self.witnessed_length
        doc["tail"] = (f"checked: trusted witnesses saw {holding} receipts" if holding
                       else "not checked: no trusted witness statement holds, so a tail cut at a receipt "
                            "boundary cannot be told from a shorter ledger")
        return doc

    @property
    def valid(self) -> bool:
        return self.first_bad is None

    @property
    def detail(self) -> str:
        bad = self.first_bad
        if bad is not None and self.contradiction is not None and bad[0] == self.contradiction.index \
                and bad[1] == self.contradiction.reason:
            return self.contradiction.detail
        return self.report.detail


def _claimed_key(raw: bytes) -> PublicKey | None:
    """The witness key a statement names, read without checking its signature."""
    try:
        fields = dcbor.decode(cose.parse_whole(raw).payload)
        key = fields.get("witness_key") if type(fields) is dict else None
        return PublicKey(key) if type(key) is bytes and len(key) == 32 else None
    except (dcbor.DcborError, ValueError):
        return None


def judge(receipts: Iterable[bytes], key: PublicKey | None, statements: Sequence[bytes],
          trusted: Collection[PublicKey], **checks: Any) -> Judged:
    """Verify `receipts` (with `key` and `checks`, as verify does), then weigh every witness
    statement — in the ledger's witness receipts and in `statements` — whose
    key is in `trusted`. An invalid ledger is judged on its valid prefix: a
    trusted statement that holds for it still grades it `witnessed`."""
    hashes: list[bytes] = []
    leaves: list[bytes] = []
    inside: list[tuple[int, bytes]] = []   # (receipts before it, statement) for witness receipts

    def hashed(raws: Iterable[bytes]) -> Iterator[bytes]:
        for raw in raws:
            hashes.append(digest(raw))
            leaves.append(merkle.leaf_hash(raw))
            yield raw

    notes = [raw for raw in statements if not raw.startswith(b"\xd2")]   # C2SP checkpoints, not COSE
    statements = [raw for raw in statements if raw.startswith(b"\xd2")]
    cosigners = [k for k in trusted if isinstance(k, VKey) and k.kind == COSIGNATURE_V1]

    def note(entry: Entry) -> None:
        if entry.kind == WITNESS and type(entry.body.get("statement")) is bytes:
            inside.append((entry.seq, entry.body["statement"]))
        elif entry.kind == COSIGNED:   # verify checked its root against the receipts before it
            notes_inside.append(entry.body["note"])

    notes_inside: list[bytes] = []
    report = verify(hashed(receipts), key, witness_files=statements, on_entry=note, **checks)
    best: tuple[int, bytes] | None = None
    shown: WitnessSeen | None = None
    contradiction: Contradiction | None = None
    for available, raw in [*inside, *((len(hashes), s) for s in statements)]:
        try:
            seen = witness.read_statement(raw)
        except witness.WitnessRejected as exc:
            claimed = _claimed_key(raw)
            if claimed is not None and claimed in trusted:   # a statement in a trusted key's name that fails
                shown = WitnessSeen(claimed.key_id, 0, exc.code)
            continue
        if seen.witness not in trusted:
            continue
        problem = ("steward_key" if seen.witness == report.steward else
                   "other_ledger" if seen.ledger_id != report.ledger_id else
                   "beyond_length" if seen.length == 0 else None)
        if problem is None:
            wrong = _contradiction(seen, available, hashes)
            if wrong is not None:
                contradiction = contradiction or wrong
                problem = "beyond_length" if wrong.reason == "history_cut" else "head_mismatch"
            elif seen.length > report.length:
                problem = "beyond_length"   # it saw receipts the ledger has, but not valid ones
        if problem is not None:
            shown = WitnessSeen(seen.witness.key_id, seen.length, problem)
        elif best is None or seen.length > best[0]:
            best = (seen.length, seen.witness.key_id)
    for raw, outside in [*((r, False) for r in notes_inside), *((r, True) for r in notes)]:
        judged = _checkpoint(raw, outside, cosigners, report, hashes, leaves)
        if judged is None:
            continue
        seen, wrong = judged
        contradiction = contradiction or wrong
        if seen.problem is not None:
            shown = seen
        elif best is None or seen.length > best[0]:
            best = (seen.length, seen.key_id)
    if best is not None:
        shown = WitnessSeen(best[1], best[0], None)
    return Judged(report, best[0] if best else 0, best[1] if best else None, contradiction, shown,
                  tuple(hashes), tuple(leaves))


def _checkpoint(raw: bytes, outside: bool, cosigners: Sequence[VKey], report: Report, hashes: list[bytes],
                leaves: list[bytes]) -> tuple[WitnessSeen, Contradiction | None] | None:
    """A C2SP checkpoint cosigned by a trusted witness, judged like a statement:
    it holds when its root is the tree's over its first size receipts. None
    when no trusted witness cosigned it (or it is not a checkpoint)."""
    try:
        read = note_format.read_note(raw)
        checkpoint = note_format.read_checkpoint(read.body)
    except note_format.NoteError:
        return None
    by = next((v for v in cosigners if note_format.cosigned_by(read, v.name, v.key) is not None), None)
    if by is None:
        return None
    kid = note_format.key_id(by.name, by.kind, by.key.raw)
    if report.ledger_id is None or checkpoint.origin != note_format.origin_for(report.ledger_id):
        return WitnessSeen(kid, checkpoint.size, "other_ledger"), None
    who = f"{by.name} ({kid.hex()})"
    if checkpoint.size == 0:
        return WitnessSeen(kid, 0, "beyond_length"), None
    if checkpoint.size > len(hashes):
        wrong = Contradiction("history_cut", len(hashes), f"trusted witness {who} cosigned {checkpoint.size} "
                                                          f"receipts; the ledger has {len(hashes)}")
        return WitnessSeen(kid, checkpoint.size, "beyond_length"), wrong if outside else None
    if merkle.root_of(leaves[:checkpoint.size]) != checkpoint.root:
        # a root does not say which receipt differs: the checkpoint's last is named
        wrong = Contradiction("history_rewritten", checkpoint.size - 1,
                              f"the first {checkpoint.size} receipts are not the tree trusted witness {who} cosigned")
        return WitnessSeen(kid, checkpoint.size, "head_mismatch"), wrong
    if checkpoint.size > report.length:
        return WitnessSeen(kid, checkpoint.size, "beyond_length"), None
    return WitnessSeen(kid, checkpoint.size, None), None


def _contradiction(seen: witness.Statement, available: int, hashes: list[bytes]) -> Contradiction | None:
    who = seen.witness.key_id.hex()
    if seen.length > available:
        return Contradiction("history_cut", available, f"trusted witness {who} saw {seen.length} receipts; "
                                                       f"the ledger has {available}")
    if seen.length >= 1 and hashes[seen.length - 1] != seen.head:
        return Contradiction("history_rewritten", seen.length - 1,
                             f"receipt {seen.length - 1} is not the one trusted witness {who} signed")
    return None
