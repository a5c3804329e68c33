"""The embedded store: one SQLite file, WAL, synchronous=FULL, append-only.

Triggers refuse UPDATE and DELETE, `application_id` marks the file as a Pool
ledger, and each `append` is one transaction — the unit the group commit shares.
Reads use their own connection, so an export does not wait for the writer.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from scheduler.ledger.store import StoreError

APPLICATION_ID = 0x506F6F6C   # "Pool"
SCHEMA_VERSION = 1
MAGIC = b"SQLite format 3\x00"
_SCHEMA = """
CREATE TABLE receipts (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, raw BLOB NOT NULL);
CREATE INDEX receipts_kind ON receipts (kind, seq);
CREATE TRIGGER receipts_no_update BEFORE UPDATE ON receipts
  BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER receipts_no_delete BEFORE DELETE ON receipts
  BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
"""


def _connect(path: Path, mode: str) -> sqlite3.Connection:
    try:
        return sqlite3.connect(f"{path.resolve().as_uri()}?mode={mode}", uri=True,
                               isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {path}: {exc}") from None


class SqliteStore:
    def __init__(self, path: str | Path, *, create: bool = False) -> None:
        self.path = Path(path)
        if not create and not self.path.is_file():
            raise StoreError(f"no ledger at {self.path}")
        self._lock = threading.Lock()
        self._conn = _connect(self.path, "rwc" if create else "rw")
        try:
            self._prepare()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise StoreError(f"{self.path} is not a Pool ledger: {exc}") from None

    def _prepare(self) -> None:
        conn = self._conn
        conn.execute("PRAGMA synchronous=FULL")
        (app_id,) = conn.execute("PRAGMA application_id").fetchone()
        if app_id == 0 and conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0:
            conn.executescript(f"BEGIN; {_SCHEMA} PRAGMA application_id={APPLICATION_ID};"
                               f" PRAGMA user_version={SCHEMA_VERSION}; COMMIT;")
        elif app_id != APPLICATION_ID:
            raise sqlite3.DatabaseError("application_id is not Pool's")
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version != SCHEMA_VERSION:
            raise sqlite3.DatabaseError(f"schema version {version}, expected {SCHEMA_VERSION}")
        if conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] != "wal":
            raise sqlite3.DatabaseError("cannot switch to WAL")

    def length(self) -> int:
        with self._lock:
            return self._count()

    def read(self, start: int = 0, stop: int | None = None) -> Iterator[bytes]:
        conn = _connect(self.path, "ro")
        try:
            rows = conn.execute("SELECT raw FROM receipts WHERE seq >= ? AND seq < ? ORDER BY seq",
                                (start, (1 << 63) - 1 if stop is None else stop))
            for (raw,) in rows:
                yield raw
        finally:
            conn.close()

    def append(self, first_seq: int, receipts: Sequence[tuple[str, bytes]]) -> None:
        rows = [(first_seq + i, kind, raw) for i, (kind, raw) in enumerate(receipts)]
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    if self._count() != first_seq:
                        raise StoreError(f"append at {first_seq} but the ledger has moved on")
                    self._conn.executemany("INSERT INTO receipts VALUES (?, ?, ?)", rows)
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise StoreError(f"append to {self.path} failed: {exc}") from None

    def _count(self) -> int:
        row = self._conn.execute("SELECT max(seq) FROM receipts").fetchone()
        return 0 if row[0] is None else row[0] + 1

    def latest(self, kind: str) -> int | None:
        with self._lock:
            return self._conn.execute("SELECT max(seq) FROM receipts WHERE kind = ?",
                                      (kind,)).fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
