"""The store contract, run unchanged against SQLite and PostgreSQL: durable
before acknowledged, one transaction per batch, exactly one of two concurrent
writers extends the ledger, rows cannot be changed, the same receipts export
to the same bytes; and a store that does not verify is refused."""

import asyncio
import sqlite3
import threading

import time

import psycopg
import pytest

from scheduler.ledger import export, keys
from scheduler.ledger.postgres import PostgresStore
from scheduler.ledger.sqlite import SqliteStore
from scheduler.ledger.steward import Steward, prepare
from scheduler.ledger.store import StoreError
from scheduler.ledger.verify import LedgerInvalid
from scheduler.ledger.writer import GroupCommitWriter


class SqliteBackend:
    name = "sqlite"
    refusal = sqlite3.IntegrityError

    def __init__(self, tmp_path):
        self.path = tmp_path / "l.db"

    def open(self, create=True):
        return SqliteStore(self.path, create=create)

    def tamper(self, *statements):
        """Run SQL with the append-only triggers out of the way."""
        conn = sqlite3.connect(self.path)
        conn.execute("DROP TRIGGER IF EXISTS receipts_no_update")
        conn.execute("DROP TRIGGER IF EXISTS receipts_no_delete")
        for statement, args in statements:
            conn.execute(statement.replace("%s", "?").replace("pool_receipts", "receipts"), args)
        conn.commit()
        conn.close()

    def try_sql(self, statement):
        conn = sqlite3.connect(self.path)
        try:
            conn.execute(statement.replace("pool_receipts", "receipts"))
        finally:
            conn.close()

    changes = ("UPDATE pool_receipts SET kind = 'x'", "DELETE FROM pool_receipts")


class PostgresBackend:
    name = "postgresql"
    refusal = psycopg.errors.RaiseException

    def __init__(self, dsn):
        self.dsn = dsn

    def open(self, create=True):
        return PostgresStore(self.dsn, create=create)

    def tamper(self, *statements):
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("SET session_replication_role = replica")   # a superuser skipping triggers
            for statement, args in statements:
                conn.execute(statement, args)

    def try_sql(self, statement):
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(statement)

    changes = SqliteBackend.changes + ("TRUNCATE pool_receipts",)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request, tmp_path):
    if request.param == "sqlite":
        return SqliteBackend(tmp_path)
    return PostgresBackend(request.getfixturevalue("postgres_dsn"))


class CountingStore:
    """Any store, counting its transactions and remembering how much was durable when."""

    def __init__(self, store, fail_next=False):
        self.store, self.commits, self.durable, self.fail_next = store, 0, 0, fail_next

    def __getattr__(self, name):
        return getattr(self.store, name)

    def append(self, first_seq, receipts, claims=None):
        if self.fail_next:
            self.fail_next = False
            raise StoreError("disk full")
        self.store.append(first_seq, receipts, claims)
        self.commits += 1
        self.durable = first_seq + len(receipts)


def test_concurrent_appends_share_commits_and_are_acknowledged_once_durable(backend, steward_key):
    store = CountingStore(backend.open())
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
    steward.close()
    reopened = Steward.open(backend.open(create=False), steward_key)
    assert reopened.length == 1001
    reopened.close()


def test_a_failed_commit_fails_its_batch_and_stores_nothing(backend, steward_key):
    store = CountingStore(backend.open())
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
    steward.close()


def test_a_bad_body_fails_only_its_caller(backend, steward_key):
    steward = Steward.open(backend.open(), steward_key)
    writer = GroupCommitWriter(steward)

    async def main():
        return await asyncio.gather(writer.append("m", {"x": 1.5}), writer.append("m", {"x": 1}),
                                    return_exceptions=True)
    bad, good = asyncio.run(main())
    assert isinstance(bad, ValueError) and good.entry.seq == 1
    steward.close()


@pytest.fixture
def filled(backend, steward_key):
    steward = Steward.open(backend.open(), steward_key)
    for n in range(5):
        steward.append("claim.submitted", {"n": n})
    steward.close()
    return backend


def _open(backend, key):
    store = backend.open(create=False)
    try:
        return Steward.open(store, key)
    except BaseException:
        store.close()
        raise


def test_opening_refuses_an_edited_row_saying_where_and_why(filled, steward_key):
    store = filled.open(create=False)
    raw = next(store.read(3, 4))
    store.close()
    filled.tamper(("UPDATE pool_receipts SET raw = %s WHERE seq = 3", (raw[:-1] + bytes([raw[-1] ^ 1]),)))
    with pytest.raises(LedgerInvalid, match="receipt 3: signature") as err:
        _open(filled, steward_key)
    assert err.value.report.length == 3


def test_opening_refuses_a_deleted_row(filled, steward_key):
    filled.tamper(("DELETE FROM pool_receipts WHERE seq = 2", ()))
    with pytest.raises(LedgerInvalid, match="receipt 2: chain"):
        _open(filled, steward_key)


def test_opening_with_another_key_is_refused(filled):
    with pytest.raises(LedgerInvalid, match="receipt 0: signature"):
        _open(filled, keys.generate())


def test_rows_cannot_be_changed_or_removed(filled):
    for statement in filled.changes:
        with pytest.raises(filled.refusal, match="append-only"):
            filled.try_sql(statement)
    assert filled.open(create=False).length() == 6


def test_a_second_writer_cannot_fork_the_chain(filled, steward_key):
    first, second = _open(filled, steward_key), _open(filled, steward_key)
    first.append("m", {})
    with pytest.raises(StoreError, match="moved on"):
        second.append("m", {})
    first.close()
    second.close()


def test_of_two_concurrent_writers_exactly_one_extends_the_ledger(filled, steward_key):
    """Both computed their batch on the same head and commit at the same moment."""
    for round_ in range(10):
        writers = [_open(filled, steward_key) for _ in range(2)]
        batches = [w.sign([prepare("m", {"writer": i, "round": round_})]) for i, w in enumerate(writers)]
        start, outcomes = threading.Barrier(2), [None, None]

        def store(i):
            start.wait()
            try:
                writers[i].store(batches[i])
                outcomes[i] = "stored"
            except StoreError as exc:
                outcomes[i] = str(exc)
        threads = [threading.Thread(target=store, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert outcomes.count("stored") == 1, outcomes
        assert "moved on" in next(o for o in outcomes if o != "stored")
        for w in writers:
            w.close()
    reopened = _open(filled, steward_key)      # and the chain still verifies
    assert reopened.length == 6 + 10
    reopened.close()


def test_the_same_receipts_export_to_the_same_bytes_from_either_store(backend, small, tmp_path):
    store = backend.open()
    store.append(0, [("claim.submitted" if i else "genesis", raw) for i, raw in enumerate(small)])
    mine = tmp_path / f"{backend.name}.cbor"
    export.write(store.read(), mine)
    store.close()
    reference = tmp_path / "reference.cbor"
    sqlite = SqliteStore(tmp_path / "reference.db", create=True)
    sqlite.append(0, [("claim.submitted" if i else "genesis", raw) for i, raw in enumerate(small)])
    export.write(sqlite.read(), reference)
    sqlite.close()
    assert mine.read_bytes() == reference.read_bytes() == b"".join(small)


# -- SQLite only ---------------------------------------------------------------

def test_wal_and_full_sync(tmp_path, steward_key):
    Steward.open(SqliteStore(tmp_path / "l.db", create=True), steward_key).close()
    store = SqliteStore(tmp_path / "l.db")
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


# -- PostgreSQL only -------------------------------------------------------------

def test_a_database_without_a_ledger_is_refused_unless_creating(postgres_dsn):
    with pytest.raises(StoreError, match="no ledger in this database"):
        PostgresStore(postgres_dsn)
    with pytest.raises(StoreError, match="cannot connect"):
        PostgresStore("host=/nonexistent-socket-dir dbname=x connect_timeout=1")


def test_a_fenced_store_appends_only_while_it_holds_the_lock(postgres_dsn, steward_key, small):
    leader = PostgresStore(postgres_dsn, create=True, fenced=True, application_name="pool:a:1")
    standby = PostgresStore(postgres_dsn, fenced=True, application_name="pool:b:2")
    with pytest.raises(StoreError, match="does not hold the leader lock"):
        leader.append(0, [("genesis", small[0])])
    assert (leader.try_lead(), standby.try_lead()) == (True, False)
    assert standby.leader() == "pool:a:1"
    leader.append(0, [("genesis", small[0])])
    with pytest.raises(StoreError, match="does not hold the leader lock"):
        standby.append(1, [("claim.submitted", small[1])])
    leader.close()                                   # the session, and with it the lock, is gone
    deadline = time.monotonic() + 10                 # (the server ends a closed session a moment later)
    while not standby.try_lead() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert standby.leader() == "pool:b:2"
    standby.append(1, [("claim.submitted", small[1])])
    assert standby.length() == 2
    standby.close()


def test_a_silent_leader_loses_its_lease_and_its_next_append_fails(postgres_dsn, small):
    leader = PostgresStore(postgres_dsn, create=True, fenced=True, lease_s=0.5)
    assert leader.try_lead()
    leader.append(0, [("genesis", small[0])])
    leader.heartbeat()
    time.sleep(1.2)                                  # silent past the lease: PostgreSQL ends the session
    standby = PostgresStore(postgres_dsn, fenced=True)
    assert standby.try_lead()
    with pytest.raises(StoreError):
        leader.heartbeat()
    with pytest.raises(StoreError):
        leader.append(1, [("claim.submitted", small[1])])
    assert standby.length() == 1
    leader.close()
    standby.close()


def test_the_documented_grants_are_enough_to_lead_and_append_and_no_more(postgres_dsn, small):
    """docs/OPERATIONS.md: after the first start, SELECT and INSERT on the receipts
    (SELECT on the metadata) are all a scheduler's role needs."""
    PostgresStore(postgres_dsn, create=True).close()      # the owner creates the schema's tables
    schema = postgres_dsn.rsplit("search_path=", 1)[1]
    role = f"app_{schema}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        conn.execute(f"GRANT SELECT, INSERT ON {schema}.pool_receipts, {schema}.pool_merkle, "
                     f"{schema}.pool_claim_receipts TO {role}")
        conn.execute(f"GRANT SELECT ON {schema}.pool_ledger_meta TO {role}")
    app_dsn = f"{postgres_dsn} user={role}"            # (libpq: the last keyword wins)
    try:
        app = PostgresStore(app_dsn, fenced=True, application_name="pool:app:1")
        assert app.try_lead() and app.leader() == "pool:app:1"
        app.append(0, [("genesis", small[0])])
        app.append(1, [("claim.submitted", small[1])])
        assert list(app.read()) == small[:2]
        app.close()
        for statement in PostgresBackend.changes:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                PostgresBackend(app_dsn).try_sql(statement)
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")
