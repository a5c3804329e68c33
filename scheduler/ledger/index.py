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


STORED_FROM = 4   # the lowest level a store keeps: subtrees of 16 receipts and up
BLOCK = 1 << STORED_FROM
_BLOCKS_KEPT = 256   # complete 16-receipt blocks whose low nodes are kept in memory


class Tree:
    """A store's in-memory right edge; `closing` gives the nodes a batch
    closes that the store keeps (level STORED_FROM and up: about one row per
    16 receipts) without moving the edge, `moved` moves it once the batch is
    durable."""

    def __init__(self, node: Callable[[int, int], bytes]) -> None:
        self._node = node
        self.frontier: merkle.Frontier | None = None   # read at the first append (a store that does not
        # verify is refused before it is read)

    def closing(self, first_seq: int, raws: Sequence[bytes]) -> tuple[merkle.Frontier, list[tuple[int, int, bytes]]]:
        if self.frontier is None or self.frontier.size != first_seq:   # or another writer appended since
            self.frontier = merkle.Frontier.over(first_seq, self._node)
        after = merkle.Frontier(self.frontier.size, self.frontier.edge)
        return after, [n for n in after.extend(merkle.leaf_hash(raw) for raw in raws) if n[0] >= STORED_FROM]

    def moved(self, after: merkle.Frontier) -> None:
        self.frontier = after


class LowLevels:
    """The nodes below STORED_FROM, computed from the receipts of their 16-receipt
    block (`read(start, stop)`: the receipts' bytes), a few complete blocks kept."""

    def __init__(self, read: Callable[[int, int], list[bytes]]) -> None:
        self._read = read
        self._blocks: dict[int, dict[tuple[int, int], bytes]] = {}

    def node(self, level: int, index: int) -> bytes | None:
        """None: the block does not hold that subtree's receipts (yet)."""
        block = (index << level) >> STORED_FROM
        nodes = self._blocks.get(block)
        if nodes is None:
            frontier, nodes = merkle.Frontier(), {}
            raws = self._read(block * BLOCK, (block + 1) * BLOCK)
            for leaf in (merkle.leaf_hash(raw) for raw in raws):
                for lv, at, value in frontier.push(leaf):
                    nodes[lv, at + (block * BLOCK >> lv)] = value
            if len(raws) == BLOCK:   # only a complete block never changes
                if len(self._blocks) >= _BLOCKS_KEPT:
                    self._blocks.pop(next(iter(self._blocks)))
                self._blocks[block] = nodes
        return nodes.get((level, index))


def first_wrong_node(rows: Iterable[tuple[int, int, bytes]], leaves: Sequence[bytes]) -> int | None:
    """Check a store's stored nodes against the tree rebuilt from its receipts'
    leaf hashes: the first receipt of the first subtree that is wrong, missing
    or beyond the receipts, or None when the stored tree is the rebuilt one."""
    n, memo = len(leaves), {}

    def node(level: int, index: int) -> bytes:
        if level == 0:
            return leaves[index]
        if (level, index) not in memo:
            memo[level, index] = merkle.node_hash(node(level - 1, 2 * index), node(level - 1, 2 * index + 1))
        return memo[level, index]
    stored = {(level, index): value for level, index, value in rows}
    expected = {(level, index) for level in range(STORED_FROM, n.bit_length()) for index in range(n >> level)}
    wrong = [index << level for (level, index) in stored.keys() - expected]
    wrong += [index << level for (level, index) in expected - stored.keys()]
    wrong += [index << level for (level, index) in sorted(expected & stored.keys())
              if node(level, index) != stored[level, index]]
    return min(wrong, default=None)
