"""The Merkle tree over the receipts (RFC 9162 §2.1), kept beside the hash chain.

    leaf hash   = SHA-256(0x00 ‖ receipt bytes)
    node hash   = SHA-256(0x01 ‖ left ‖ right)
    MTH(D[0:n]) = the root over the first n receipts; the empty tree's is SHA-256("")

What is stored is every *complete* subtree, as it is closed: node (level, index)
is the root over receipts index·2^level … (index+1)·2^level − 1. A store writes
the nodes an append closes (`Frontier.push`) in the same transaction as the
receipts, so the tree is never behind or ahead of the chain. Any complete
subtree is then one read, any other range's root (the right edge of a tree
whose size is not a power of two) is at most log₂ n reads, and an inclusion or
consistency proof is O(log n) reads (`Proofs`).

The verifiers (`verify_inclusion`, `verify_consistency`) follow RFC 9162
§2.1.3.2 and §2.1.4.2 step by step; they need nothing but hashes.

Why not `pymerkle`: it keeps its own copy of every leaf in its own storage
(memory or its own SQLite file), so the tree could not be written in the
ledger's transaction, nor live in PostgreSQL beside the receipts, and its
proofs are its own objects; the RFC's arithmetic is about 150 lines.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence

EMPTY_ROOT = hashlib.sha256(b"").digest()

Node = Callable[[int, int], bytes]   # (level, index) -> the hash of that complete subtree


def leaf_hash(raw: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + raw).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def root_of(leaves: Sequence[bytes]) -> bytes:
    """MTH over leaf hashes, by the RFC's recursive definition (the plain twin
    every faster path is tested against)."""
    n = len(leaves)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return leaves[0]
    k = _split(n)
    return node_hash(root_of(leaves[:k]), root_of(leaves[k:]))


def _split(n: int) -> int:
    """The largest power of two smaller than n (n ≥ 2)."""
    return 1 << ((n - 1).bit_length() - 1)


class Frontier:
    """The right edge of a tree of `size` leaves: the roots of its complete
    subtrees in the binary decomposition of size, largest first. Pushing a leaf
    returns the nodes it closes, (level, index, hash), the leaf itself first."""

    def __init__(self, size: int = 0, edge: Sequence[bytes] = ()) -> None:
        if len(edge) != bin(size).count("1"):
            raise ValueError(f"a tree of {size} leaves has {bin(size).count('1')} edge nodes, not {len(edge)}")
        self.size = size
        self.edge = list(edge)

    @classmethod
    def over(cls, size: int, node: Node) -> Frontier:
        """The frontier of a stored tree: one read per edge node."""
        return cls(size, [node(level, index) for level, index in edge_nodes(size)])

    def push(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        closed = [(0, self.size, leaf)]
        level, index, value = 0, self.size, leaf
        while index & 1:
            value = node_hash(self.edge.pop(), value)
            level, index = level + 1, index >> 1
            closed.append((level, index, value))
        self.edge.append(value)
        self.size += 1
        return closed

    def extend(self, leaves: Iterable[bytes]) -> list[tuple[int, int, bytes]]:
        closed: list[tuple[int, int, bytes]] = []
        for leaf in leaves:
            closed += self.push(leaf)
        return closed

    def root(self) -> bytes:
        if not self.edge:
            return EMPTY_ROOT
        value = self.edge[-1]
        for left in reversed(self.edge[:-1]):
            value = node_hash(left, value)
        return value


def edge_nodes(size: int) -> list[tuple[int, int]]:
    """(level, index) of the complete subtrees that make up [0, size), largest first."""
    nodes, start = [], 0
    for level in range(size.bit_length() - 1, -1, -1):
        if size >> level & 1:
            nodes.append((level, start >> level))
            start += 1 << level
    return nodes


Nodes = Callable[[list[tuple[int, int]]], dict[tuple[int, int], bytes]]   # many nodes in one read


def parts(start: int, end: int) -> list[tuple[int, int]]:
    """The complete subtrees (level, index) that make up [start, end), largest
    first, for a range of the RFC's recursion (start aligned to the largest
    power of two ≤ end − start, or a range ending at the tree's right edge)."""
    out, at = [], start
    while at < end:
        level = (end - at).bit_length() - 1
        out.append((level, at >> level))
        at += 1 << level
    return out


class Proofs:
    """Roots and proofs from stored complete subtrees, RFC 9162 §2.1.3.1 and
    §2.1.4.1: the subtrees a proof needs are worked out first, then read in one
    go (`nodes`, a store's batch read; else one `node` read each)."""

    def __init__(self, node: Node, nodes: Nodes | None = None) -> None:
        self.node = node
        self._nodes = nodes

    def _read(self, keys: list[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        if self._nodes is not None:
            return self._nodes(sorted(set(keys)))
        return {key: self.node(*key) for key in keys}

    def _roots(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """MTH of each range, from one read of all their parts."""
        split = [parts(start, end) for start, end in ranges]
        got = self._read([key for keys in split for key in keys])
        out = []
        for keys in split:
            if not keys:
                out.append(EMPTY_ROOT)
                continue
            value = got[keys[-1]]
            for key in reversed(keys[:-1]):
                value = node_hash(got[key], value)
            out.append(value)
        return out

    def root(self, start: int, end: int) -> bytes:
        """MTH(D[start:end]) for a range of the RFC's recursion (see parts)."""
        return self._roots([(start, end)])[0]

    def inclusion(self, index: int, size: int) -> list[bytes]:
        """PATH(index, D[0:size]), leaf-side first."""
        if not 0 <= index < size:
            raise ValueError(f"leaf {index} is not in a tree of {size}")
        ranges: list[tuple[int, int]] = []
        start, end = 0, size
        while end - start > 1:
            k = _split(end - start)
            if index < start + k:
                ranges.append((start + k, end))
                end = start + k
            else:
                ranges.append((start, start + k))
                start += k
        ranges.reverse()
        return self._roots(ranges)

    def consistency(self, old: int, new: int) -> list[bytes]:
        """PROOF(old, D[0:new]), RFC 9162 §2.1.4.1 (empty when old is 0 or equals new)."""
        ranges: list[tuple[int, int]] = []
        consistency(old, new, lambda start, end: ranges.append((start, end)) or b"")
        return self._roots(ranges)


def _subproof(m: int, start: int, end: int, complete: bool, root: Callable[[int, int], bytes]) -> list[bytes]:
    """SUBPROOF(m, D[start:end], b) of RFC 9162 §2.1.4.1, m counted from start."""
    n = end - start
    if m == n:
        return [] if complete else [root(start, end)]
    k = _split(n)
    if m <= k:
        return _subproof(m, start, start + k, complete, root) + [root(start + k, end)]
    return _subproof(m - k, start + k, end, False, root) + [root(start, start + k)]


def consistency(old: int, new: int, root: Callable[[int, int], bytes]) -> list[bytes]:
    if not 0 <= old <= new:
        raise ValueError(f"no consistency proof from {old} to {new}")
    if old == 0 or old == new:
        return []
    return _subproof(old, 0, new, True, root)


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> bool:
    """RFC 9162 §2.1.3.2."""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == root


def verify_consistency(old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> bool:
    """RFC 9162 §2.1.4.2 (old = 0 or old = new: trivially consistent with an empty proof)."""
    if not 0 <= old <= new:
        return False
    if old == new:
        return not proof and old_root == new_root
    if old == 0:
        return not proof
    path = list(proof)
    if old & (old - 1) == 0:   # old is a power of two: its root is the first node
        path.insert(0, old_root)
    if not path:
        return False
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and fr == old_root and sr == new_root
