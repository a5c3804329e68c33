"""The head record beside a SQLite store: written after every commit, and a
store that holds less than it once acknowledged is refused, or its loss
accepted and recorded (issue 12, item 5)."""

import os
import sqlite3

import pytest
from hypothesis import given, settings, strategies as st

from scheduler.ledger.headrecord import SLOT, Head, HeadRecord, path_for
from scheduler.ledger.receipts import LOSS_ACCEPTED
from scheduler.ledger.sqlite import SqliteStore
from scheduler.ledger.steward import open_ledger
from scheduler.ledger.store import HistoryLost, StoreReadOnly
from scheduler.ledger.verify import verify


@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=8), st.integers(0, 2 * SLOT - 1))
@settings(max_examples=60, deadline=None)
def test_a_torn_write_leaves_the_last_or_the_previous_record(tmp_path_factory, lengths, spoiled):
    path = tmp_path_factory.mktemp("h") / "x.head"
    record = HeadRecord(path)
    heads = [Head(n, n.to_bytes(8, "big") * 4) for n in lengths]
    for head in heads:
        record.write(head)
    record.close()
    data = bytearray(path.read_bytes())
    assert len(data) == 2 * SLOT
    data[spoiled] ^= 0x55   # a byte of either slot torn
    path.write_bytes(bytes(data))
    last_slot = (len(heads) - 1) % 2      # writes alternate, the first to slot 0
    if spoiled // SLOT == last_slot:
        assert HeadRecord(path).read() == (heads[-2] if len(heads) > 1 else None)
    else:
        assert HeadRecord(path).read() == heads[-1]


def _ledger(tmp_path, steward_key, n=5):
    steward = open_ledger(tmp_path / "l.db", steward_key)
    for i in range(n):
        steward.append("claim.submitted", {"n": i})
    length, head = steward.length, steward.head
    steward.close()
    return tmp_path / "l.db", length, head


def test_every_commit_moves_the_record(tmp_path, steward_key):
    path, length, head = _ledger(tmp_path, steward_key)
    assert HeadRecord(path_for(path)).read() == Head(length, head)


def _shorten(path, keep):
    """What a lost WAL does: the store as it was at `keep` receipts (its tree
    and claim index too: they are written in the receipts' transactions)."""
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER receipts_no_delete")
    conn.execute("DROP TRIGGER merkle_no_delete")
    conn.execute("DELETE FROM receipts WHERE seq >= ?", (keep,))
    conn.execute("DELETE FROM merkle WHERE (idx + 1) << level > ?", (keep,))
    conn.execute("DELETE FROM claim_receipts WHERE seq >= ?", (keep,))
    conn.commit()
    conn.close()


def test_a_shorter_store_is_refused_before_anything_is_written(tmp_path, steward_key):
    path, length, head = _ledger(tmp_path, steward_key)
    _shorten(path, 0)   # everything lost: without the record this would get a new genesis
    with pytest.raises(HistoryLost, match=r"lost 6 acknowledged receipts \(seq 0 to 5\)"):
        open_ledger(path, steward_key)
    assert SqliteStore(path).length() == 0


def test_a_diverging_store_is_refused(tmp_path, steward_key, build):
    path, length, head = _ledger(tmp_path, steward_key)
    other = tmp_path / "other.db"
    store = SqliteStore(other, create=True)
    store.append(0, [("k", raw) for raw in build([("claim.submitted", {"x": i}) for i in range(9)])])
    store.close()
    os.replace(other, path)   # another ledger put in place, longer than the record
    with pytest.raises(HistoryLost, match="receipt 5 is not the one recorded"):
        open_ledger(path, steward_key)


def test_an_accepted_loss_is_a_receipt_and_the_record_follows_again(tmp_path, steward_key):
    path, length, head = _ledger(tmp_path, steward_key)
    _shorten(path, 3)
    steward = open_ledger(path, steward_key, accept_loss=True)
    assert steward.length == 4
    steward.append("claim.submitted", {"after": True})
    steward.close()
    found = []
    assert verify(SqliteStore(path).read(), steward_key.public, on_entry=found.append).valid
    loss = found[3]
    assert loss.kind == LOSS_ACCEPTED
    assert loss.body == {"recorded_length": length, "recorded_head": head, "length": 3}
    assert HeadRecord(path_for(path)).read().length == 5
    open_ledger(path, steward_key).close()   # nothing to accept any more


def test_while_a_loss_is_not_accepted_appends_do_not_move_the_record(tmp_path, steward_key, build):
    path, length, head = _ledger(tmp_path, steward_key)
    _shorten(path, 2)
    store = SqliteStore(path)
    assert store.loss.recorded_length == length and store.loss.length == 2
    store.append(2, [("k", b"x")])   # e.g. poolctl ledger import, or a tool
    store.close()
    assert HeadRecord(path_for(path)).read() == Head(length, head)


def test_the_probe_names_a_full_and_a_read_only_store(tmp_path, steward_key):
    """(A really full filesystem: tests/e2e/test_durability.py, on a small tmpfs.)"""
    path, _, _ = _ledger(tmp_path, steward_key)
    store = SqliteStore(path)
    store.probe()
    store._conn.execute("PRAGMA query_only=1")   # SQLite answers SQLITE_READONLY to any write
    with pytest.raises(StoreReadOnly, match="cannot write to"):
        store.probe()
    store.close()
    assert not any(p.name.endswith(".probe") for p in tmp_path.iterdir())
