"""The SQLite store and the group commit: durable before acknowledged, one
transaction per batch, and a file that does not verify is refused."""

import asyncio
import sqlite3

import pytest

from scheduler.ledger import keys
from scheduler.ledger.sqlite import SqliteStore
from scheduler.ledger.steward import Steward, open_ledger
from scheduler.ledger.store import StoreError
from scheduler.ledger.verify import LedgerInvalid
from scheduler.ledger.writer import GroupCommitWriter


class CountingStore(SqliteStore):
    """Counts transactions and remembers how much was durable when."""

    def __init__(self, path, fail_next=False):
        super().__init__(path, create=True)
        self.commits, self.durable, self.fail_next = 0, 0, fail_next

    def append(self, first_seq, receipts):
        if self.fail_next:
            self.fail_next = False
            raise StoreError("disk full")
        super().append(first_seq, receipts)
        self.commits += 1
        self.durable = first_seq + len(receipts)


def test_concurrent_appends_share_commits_and_are_acknowledged_once_durable(tmp_path, steward_key):
    store = CountingStore(tmp_path / "l.db")
    steward = Steward.open(store, steward_key)
    writer = GroupCommitWriter(steward)

    async def appender(name):
        for n in range(50):
            receipt = await writer.append("metered", {"by": name, "n": n})
            assert receipt.entry.seq < store.durable      # stored before we heard back
    async def main():
        await asyncio.gather(*(appender(f"t{i}") for i in range(20)))
        await writer.close()

    before = store.commits
    asyncio.run(main())
    assert steward.length == 1 + 1000
    assert store.commits - before <= 100       # 1000 appends, far fewer transactions
    reopened = open_ledger(tmp_path / "l.db", steward_key)
    assert reopened.length == 1001
    reopened.close()


def test_a_failed_commit_fails_its_batch_and_stores_nothing(tmp_path, steward_key):
    store = CountingStore(tmp_path / "l.db")
    steward = Steward.open(store, steward_key)
    writer = GroupCommitWriter(steward)
    store.fail_next = True

    async def main():
        results = await asyncio.gather(*(writer.append("m", {"n": n}) for n in range(3)),
                                       return_exceptions=True)
        after = await writer.append("m", {"n": 99})
        await writer.close()
        return results, after

    results, after = asyncio.run(main())
    assert all(isinstance(r, StoreError) for r in results)
    assert (after.entry.seq, steward.length, store.length()) == (1, 2, 2)


def test_a_bad_body_fails_only_its_caller(tmp_path, steward_key):
    writer = GroupCommitWriter(open_ledger(tmp_path / "l.db", steward_key))

    async def main():
        return await asyncio.gather(writer.append("m", {"x": 1.5}), writer.append("m", {"x": 1}),
                                    return_exceptions=True)
    bad, good = asyncio.run(main())
    assert isinstance(bad, ValueError) and good.entry.seq == 1


def _raw_sql(path, *statements):
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER IF EXISTS receipts_no_update")
    conn.execute("DROP TRIGGER IF EXISTS receipts_no_delete")
    for sql, args in statements:
        conn.execute(sql, args)
    conn.commit()
    conn.close()


@pytest.fixture
def ledger_file(tmp_path, steward_key):
    steward = open_ledger(tmp_path / "l.db", steward_key)
    for n in range(5):
        steward.append("claim.submitted", {"n": n})
    steward.close()
    return tmp_path / "l.db"


def test_opening_refuses_an_edited_row_saying_where_and_why(ledger_file, steward_key):
    raw = next(SqliteStore(ledger_file).read(3, 4))
    _raw_sql(ledger_file, ("UPDATE receipts SET raw = ? WHERE seq = 3",
                           (raw[:-1] + bytes([raw[-1] ^ 1]),)))
    with pytest.raises(LedgerInvalid, match="receipt 3: signature") as err:
        open_ledger(ledger_file, steward_key)
    assert err.value.report.length == 3


def test_opening_refuses_a_deleted_row(ledger_file, steward_key):
    _raw_sql(ledger_file, ("DELETE FROM receipts WHERE seq = 2", ()))
    with pytest.raises(LedgerInvalid, match="receipt 2: chain"):
        open_ledger(ledger_file, steward_key)


def test_opening_with_another_key_is_refused(ledger_file):
    with pytest.raises(LedgerInvalid, match="receipt 0: signature"):
        open_ledger(ledger_file, keys.generate())


def test_rows_cannot_be_updated_or_deleted(ledger_file):
    conn = sqlite3.connect(ledger_file)
    for sql in ("UPDATE receipts SET kind = 'x'", "DELETE FROM receipts"):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(sql)
    conn.close()


def test_a_second_writer_cannot_fork_the_chain(ledger_file, steward_key):
    first, second = open_ledger(ledger_file, steward_key), open_ledger(ledger_file, steward_key)
    first.append("m", {})
    with pytest.raises(StoreError, match="moved on"):
        second.append("m", {})
    first.close()
    second.close()


def test_wal_and_full_sync(ledger_file):
    store = SqliteStore(ledger_file)
    assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2   # FULL
    store.close()


@pytest.mark.parametrize("content", [b"not a database at all, just text" * 10, None])
def test_a_file_that_is_not_a_pool_ledger_is_refused(tmp_path, content):
    path = tmp_path / "other.db"
    if content is None:
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE t (x)")
        conn.commit()
        conn.close()
    else:
        path.write_bytes(content)
    with pytest.raises(StoreError, match="not a Pool ledger"):
        SqliteStore(path)
    with pytest.raises(StoreError, match="no ledger"):
        SqliteStore(tmp_path / "absent.db")
