"""The SQLite store's write-ahead log is copied into the database off the
commit path (SqliteStore.tidy_wal, run by the group-commit writer's own
thread every WAL_TIDY_BYTES appended), not inside whichever commit finds it
past SQLite's default 1,000 pages."""

from __future__ import annotations

import asyncio
import sqlite3

from scheduler.ledger import sqlite as store_module
from scheduler.ledger.steward import open_ledger
from scheduler.ledger.writer import GroupCommitWriter


def _frames_left(path) -> int:
    """WAL frames not yet in the database, as a PASSIVE checkpoint of nothing new sees them."""
    with sqlite3.connect(path) as conn:
        busy, log_frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return log_frames - copied


def test_the_writer_copies_the_wal_into_the_database_beside_its_commits(tmp_path, steward_key, monkeypatch):
    monkeypatch.setattr(store_module, "WAL_TIDY_BYTES", 200_000)
    path = tmp_path / "ledger.sqlite"
    steward = open_ledger(path, steward_key)
    store = steward._store
    assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == store_module.WAL_AUTOCHECKPOINT_PAGES

    async def run() -> None:
        writer = GroupCommitWriter(steward)
        for n in range(60):   # ~300 kB of receipts: past WAL_TIDY_BYTES once at least
            await writer.append("metered", {"n": n, "pad": "x" * 5_000})
        assert writer._tidying is not None   # the writer asked for a copy
        await writer._tidying
        await writer.close()

    asyncio.run(run())
    assert store._walled < store_module.WAL_TIDY_BYTES
    steward_length = steward.length
    steward.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM receipts").fetchone()[0] == steward_length


def test_tidy_wal_copies_what_was_committed_and_appends_go_on(tmp_path, steward_key):
    path = tmp_path / "ledger.sqlite"
    steward = open_ledger(path, steward_key)
    for n in range(20):
        steward.append("metered", {"n": n, "pad": "x" * 5_000})
    steward.tidy_wal()
    assert _frames_left(path) == 0 and not steward.wal_due()
    steward.append("metered", {"n": 20})
    assert steward.length == 21 + 1   # the genesis, then 21
    steward.close()
