"""The Merkle tree (RFC 9162 §2.1): the stored-subtree paths against the RFC's
recursive definitions, the verifiers against the proofs, and every proof
refused once one byte of it, its leaf or its root changes."""

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.ledger import merkle


def leaves(n):
    return [merkle.leaf_hash(i.to_bytes(4, "big")) for i in range(n)]


def stored(ls):
    """The nodes a store would hold for these leaves, pushed one by one."""
    frontier, nodes = merkle.Frontier(), {}
    for leaf in ls:
        for level, index, value in frontier.push(leaf):
            nodes[level, index] = value
    return frontier, nodes


def rfc_path(m, d):
    """PATH(m, D[n]) exactly as RFC 9162 §2.1.3.1 writes it."""
    n = len(d)
    if n == 1:
        return []
    k = merkle._split(n)
    if m < k:
        return rfc_path(m, d[:k]) + [merkle.root_of(d[k:])]
    return rfc_path(m - k, d[k:]) + [merkle.root_of(d[:k])]


def rfc_subproof(m, d, b):
    n = len(d)
    if m == n:
        return [] if b else [merkle.root_of(d)]
    k = merkle._split(n)
    if m <= k:
        return rfc_subproof(m, d[:k], b) + [merkle.root_of(d[k:])]
    return rfc_subproof(m - k, d[k:], False) + [merkle.root_of(d[:k])]


def test_leaf_and_node_prefixes():
    assert merkle.leaf_hash(b"a") == hashlib.sha256(b"\x00a").digest()
    assert merkle.node_hash(b"L" * 32, b"R" * 32) == hashlib.sha256(b"\x01" + b"L" * 32 + b"R" * 32).digest()
    assert merkle.root_of([]) == hashlib.sha256(b"").digest() == merkle.Frontier().root()


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 140), st.data())
def test_stored_subtrees_give_the_rfc_roots_and_proofs(n, data):
    ls = leaves(n)
    frontier, nodes = stored(ls)
    proofs = merkle.Proofs(lambda level, index: nodes[level, index])
    assert frontier.root() == merkle.root_of(ls) == proofs.root(0, n)
    assert merkle.Frontier.over(n, lambda l, i: nodes[l, i]).edge == frontier.edge
    m = data.draw(st.integers(0, n - 1))
    size = data.draw(st.integers(m + 1, n))
    path = proofs.inclusion(m, size)
    assert path == rfc_path(m, ls[:size])
    assert merkle.verify_inclusion(m, size, ls[m], path, merkle.root_of(ls[:size]))
    old = data.draw(st.integers(0, n))
    proof = proofs.consistency(old, n)
    assert proof == ([] if old in (0, n) else rfc_subproof(old, ls, True))
    assert merkle.verify_consistency(old, n, merkle.root_of(ls[:old]), frontier.root(), proof)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 70), st.data())
def test_any_changed_byte_fails_a_proof(n, data):
    ls = leaves(n)
    frontier, nodes = stored(ls)
    proofs = merkle.Proofs(lambda level, index: nodes[level, index])
    m = data.draw(st.integers(0, n - 1))
    path, root = proofs.inclusion(m, n), frontier.root()
    flip = data.draw(st.integers(0, 32 * (len(path) + 2) - 1))
    blob = bytearray(ls[m] + b"".join(path) + root)
    blob[flip] ^= 1 << data.draw(st.integers(0, 7))
    leaf, rest = bytes(blob[:32]), bytes(blob[32:])
    changed = [rest[i:i + 32] for i in range(0, len(rest) - 32, 32)]
    assert not merkle.verify_inclusion(m, n, leaf, changed, rest[-32:])
    old = data.draw(st.integers(1, n - 1))
    proof = proofs.consistency(old, n)
    old_root = merkle.root_of(ls[:old])
    assert merkle.verify_consistency(old, n, old_root, root, proof)
    blob = bytearray(old_root + b"".join(proof) + root)
    blob[data.draw(st.integers(0, len(blob) - 1))] ^= 1
    parts = [bytes(blob[i:i + 32]) for i in range(0, len(blob), 32)]
    assert not merkle.verify_consistency(old, n, parts[0], parts[-1], parts[1:-1])


def test_bad_arguments():
    with pytest.raises(ValueError):
        merkle.Proofs(lambda l, i: b"").inclusion(3, 3)
    with pytest.raises(ValueError):
        merkle.consistency(4, 3, lambda a, b: b"")
    with pytest.raises(ValueError):
        merkle.Frontier(3, [b"x"])
    assert not merkle.verify_inclusion(0, 0, b"x" * 32, [], b"x" * 32)
    assert not merkle.verify_consistency(2, 1, b"", b"", [])
