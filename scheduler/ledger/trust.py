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

from scheduler.ledger import witness
from scheduler.ledger.keys import PublicKey
from scheduler.ledger.receipts import WITNESS, Entry, digest
from scheduler.ledger.verify import Report, verify


class Contradiction(NamedTuple):
    reason: str        # history_rewritten | history_cut
    index: int         # the first receipt the statement and the ledger disagree on
    detail: str


class Judged(NamedTuple):
    report: Report
    witnessed_length: int               # the longest trusted statement that holds (0: none)
    witness_key_id: bytes | None        # whose
    contradiction: Contradiction | None

    def document(self) -> dict:
        doc = self.report.document()
        doc["grade"] = "witnessed" if self.witnessed_length else "self-attested"
        doc["witnessed_length"] = self.witnessed_length
        doc["witness"] = None if self.witness_key_id is None else {
            "key_id": self.witness_key_id.hex(), "length": self.witnessed_length, "problem": None}
        if self.contradiction is not None:
            doc.update(valid=False, first_bad_index=self.contradiction.index, reason=self.contradiction.reason)
        return doc

    @property
    def valid(self) -> bool:
        return self.report.valid and self.contradiction is None

    @property
    def detail(self) -> str:
        return self.contradiction.detail if self.contradiction else self.report.detail


def judge(receipts: Iterable[bytes], key: PublicKey | None, statements: Sequence[bytes],
          trusted: Collection[PublicKey], **checks: Any) -> Judged:
    """Verify `receipts` (with `key` and `checks`, as verify does), then weigh every witness
    statement — in the ledger's witness receipts and in `statements` — whose
    key is in `trusted`."""
    hashes: list[bytes] = []
    inside: list[tuple[int, bytes]] = []   # (receipts before it, statement) for witness receipts

    def hashed(raws: Iterable[bytes]) -> Iterator[bytes]:
        for raw in raws:
            hashes.append(digest(raw))
            yield raw

    def note(entry: Entry) -> None:
        if entry.kind == WITNESS and type(entry.body.get("statement")) is bytes:
            inside.append((entry.seq, entry.body["statement"]))

    report = verify(hashed(receipts), key, witness_files=statements, on_entry=note, **checks)
    if not report.valid:
        return Judged(report, 0, None, None)
    best: tuple[int, bytes] | None = None
    for available, raw in [*inside, *((report.length, s) for s in statements)]:
        try:
            seen = witness.read_statement(raw)
        except witness.WitnessRejected:
            continue
        if seen.witness not in trusted or seen.witness == report.steward or seen.ledger_id != report.ledger_id:
            continue
        wrong = _contradiction(seen, available, hashes)
        if wrong is not None:
            return Judged(report, 0, None, wrong)
        if best is None or seen.length > best[0]:
            best = (seen.length, seen.witness.key_id)
    return Judged(report, best[0] if best else 0, best[1] if best else None, None)


def _contradiction(seen: witness.Statement, available: int, hashes: list[bytes]) -> Contradiction | None:
    who = seen.witness.key_id.hex()
    if seen.length > available:
        return Contradiction("history_cut", available, f"trusted witness {who} saw {seen.length} receipts; "
                                                       f"the ledger has {available}")
    if seen.length >= 1 and hashes[seen.length - 1] != seen.head:
        return Contradiction("history_rewritten", seen.length - 1,
                             f"receipt {seen.length - 1} is not the one trusted witness {who} signed")
    return None
