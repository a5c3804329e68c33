"""The Merkle tree and the claim index kept beside the receipts, in both
stores: written in the receipts' transaction, equal to the RFC 9162 root over
the receipts read back, surviving a reopen, a second writer of a shared store,
and built from the receipts for a store that had none."""

import psycopg
import pytest

from scheduler.ledger import merkle
from scheduler.ledger.postgres import PostgresStore
from scheduler.ledger.steward import Steward, prepare
from tests.ledger.test_store import backend  # noqa: F401  (the fixture: SQLite and PostgreSQL)


def claims(i):
    return {"claim_id": f"c{i % 3}", "hold_uj": i} if i % 2 else {"spec": {"claim_id": f"c{i % 3}"}, "seq": i}


def reference(store):
    raws = list(store.read())
    return merkle.root_of([merkle.leaf_hash(raw) for raw in raws]), len(raws)


def named(store, claim):
    """The seqs whose bodies name the claim, found by reading every receipt."""
    from scheduler.ledger.index import claims_in
    return [seq for c, seq in claims_in(0, store.read()) if c == claim]


def test_the_tree_and_index_follow_every_append_and_survive_a_reopen(backend, steward_key):  # noqa: F811
    store = backend.open()
    steward = Steward.open(store, steward_key)
    for i in range(1, 24):
        steward.commit([prepare("claim_admitted", claims(i * 7 + j)) for j in range(i % 4 + 1)])
        if i % 5 == 0:
            steward.append("metered", {"worker_id": "w", "window_seq": i, "deltas": []})
    root, n = reference(store)
    assert n == steward.length > 60 and steward.root() == root
    proofs = merkle.Proofs(store.tree_node)
    for m in (0, 15, 16, 33, n - 1):
        leaf = merkle.leaf_hash(next(store.read(m, m + 1)))
        assert merkle.verify_inclusion(m, n, leaf, proofs.inclusion(m, n), root)
    assert steward.claim_seqs("c1") == named(store, "c1") and steward.claim_seqs("c1")
    for size in (1, 2, 5, n):
        assert steward.root(size) == merkle.root_of([merkle.leaf_hash(r) for r in store.read(0, size)])
    steward.close()
    again = Steward.open(backend.open(create=False), steward_key)
    again.append("claim_admitted", claims(1))
    root, n = reference(again._store)
    assert again.root() == root
    proof = again.proofs.inclusion(n - 1, n)
    assert merkle.verify_inclusion(n - 1, n, merkle.leaf_hash(next(again.read(n - 1))), proof, root)
    again.close()


def test_a_store_without_a_tree_gets_one_from_its_receipts(backend, steward_key):  # noqa: F811
    store = backend.open()
    steward = Steward.open(store, steward_key)
    steward.commit([prepare("claim_admitted", claims(i)) for i in range(40)])
    seqs = steward.claim_seqs("c2")
    steward.close()
    if backend.name == "sqlite":
        backend.try_sql("DROP TABLE merkle")
        backend.try_sql("DROP TABLE claim_receipts")
    else:
        backend.try_sql("DROP TABLE pool_merkle")
        backend.try_sql("DROP TABLE pool_claim_receipts")
    store = backend.open(create=False)
    root, n = reference(store)
    assert n == 41 and merkle.Proofs(store.tree_node).root(0, n) == root
    assert store.claim_seqs("c2") == seqs
    store.close()


def test_a_refused_append_adds_no_node(backend, steward_key, small):  # noqa: F811
    store = backend.open()
    store.append(0, [("genesis", small[0])])
    with pytest.raises(Exception):
        store.append(0, [("genesis", small[0])])   # the ledger has moved on
    store.append(1, [("claim.submitted", small[1])])
    assert merkle.Proofs(store.tree_node).root(0, 2) == merkle.root_of([merkle.leaf_hash(r) for r in small[:2]])
    store.close()


def test_two_writers_of_one_postgresql_ledger_keep_one_tree(postgres_dsn, build):
    """A standby that takes over appends on top of what the old leader stored."""
    small = build([("claim_admitted", claims(i)) for i in range(40)])
    first, second = PostgresStore(postgres_dsn, create=True), PostgresStore(postgres_dsn)
    first.append(0, [("genesis", small[0])])
    first.append(1, [("k", raw) for raw in small[1:20]])
    second.append(20, [("k", raw) for raw in small[20:30]])
    first.append(30, [("k", raw) for raw in small[30:]])
    root, n = reference(second)
    assert merkle.Proofs(first.tree_node).root(0, n) == root == merkle.Proofs(second.tree_node).root(0, n)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:   # 41 receipts: (4, 0), (4, 1), (5, 0)
        assert conn.execute("SELECT min(level), count(*) FROM pool_merkle").fetchone() == (4, 3)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn, pytest.raises(psycopg.errors.RaiseException):
        conn.execute("UPDATE pool_merkle SET hash = hash")
    first.close()
    second.close()


def test_verify_checks_the_stored_tree_against_the_receipts(tmp_path, steward_key):
    """poolctl ledger verify rebuilds the tree from a store's receipts and
    refuses stored nodes that are not it (reason tree, at the first receipt of
    the first wrong subtree); an export has no stored tree to check."""
    import json
    import sqlite3
    import subprocess
    import sys
    from pathlib import Path
    path = tmp_path / "l.db"
    steward = Steward.open(__import__("scheduler.ledger.sqlite", fromlist=["SqliteStore"]).SqliteStore(
        path, create=True), steward_key)
    steward.commit([prepare("test.claimed", claims(i)) for i in range(70)])   # a kind verify does not judge
    steward.close()
    poolctl = [str(Path(sys.executable).with_name("poolctl")), "ledger", "verify", str(path), "-o", "json"]
    assert json.loads(subprocess.run(poolctl, capture_output=True, text=True).stdout)["valid"]
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER merkle_no_update")
    conn.execute("UPDATE merkle SET hash = zeroblob(32) WHERE level = 4 AND idx = 2")
    conn.commit()
    conn.close()
    done = subprocess.run(poolctl, capture_output=True, text=True)
    doc = json.loads(done.stdout)
    assert done.returncode == 1 and (doc["reason"], doc["first_bad_index"], doc["length"]) == ("tree", 32, 32)
