"""What a store keeps beside the receipts, in the same transaction as them:
the Merkle tree's complete subtrees (merkle.py) and which receipts name which
claim (so a tenant's proof finds its claim's receipts without a scan).

A receipt names a claim when its body has a text `claim_id`, or a `spec` map
with a text `claim_id` (a submission): the scheduler's claim kinds
(docs/LEDGER.md, "The scheduler's receipt kinds"). The index is a hint: the
proof server reads the receipts it names and checks them like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from scheduler.ledger import cose, merkle
from scheduler.ledger.dcbor import DcborError
from scheduler.ledger.receipts import ReceiptError, read_core

Claims = Sequence[tuple[str, int]]   # (claim id, seq)


def claim_of(body: dict[str, Any]) -> str | None:
    claim = body.get("claim_id")
    if type(claim) is str and claim:
        return claim
    spec = body.get("spec")
    claim = spec.get("claim_id") if type(spec) is dict else None
    return claim if type(claim) is str and claim else None


def claims_in(first_seq: int, raws: Iterable[bytes]) -> list[tuple[str, int]]:
    """The claim index rows of receipts read back (an import, a catch-up): each
    core is decoded, so the append path passes them instead."""
    rows = []
    for seq, raw in enumerate(raws, first_seq):
        try:
            claim = claim_of(read_core(cose.parse_whole(raw).payload)[0].body)
        except (DcborError, ReceiptError):
            continue   # verification says what is wrong with it
        if claim is not None:
            rows.append((claim, seq))
    return rows


class Tree:
    """A store's in-memory right edge; `closing` gives the nodes a batch closes
    without moving the edge, `moved` moves it once the batch is durable."""

    def __init__(self, node: Callable[[int, int], bytes], size: int) -> None:
        self._node = node
        self.frontier = merkle.Frontier.over(size, node)

    def closing(self, first_seq: int, raws: Sequence[bytes]) -> tuple[merkle.Frontier, list[tuple[int, int, bytes]]]:
        if self.frontier.size != first_seq:   # another writer of a shared store appended since
            self.frontier = merkle.Frontier.over(first_seq, self._node)
        after = merkle.Frontier(self.frontier.size, self.frontier.edge)
        return after, after.extend(merkle.leaf_hash(raw) for raw in raws)

    def moved(self, after: merkle.Frontier) -> None:
        self.frontier = after
