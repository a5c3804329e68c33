"""The embedded store: one SQLite file, WAL, synchronous=FULL, append-only.

Triggers refuse UPDATE and DELETE, `application_id` marks the file as a Pool
ledger, and each `append` is one transaction — the unit the group commit shares.
Reads use their own connection, so an export does not wait for the writer.

After each commit the store's length and head go to its head record
(headrecord.py), outside the SQLite file; opening compares the two and sets
`loss` when the store holds less than it once acknowledged. SQLite's errors are
mapped to the store's error types in one place (`_mapped`).
"""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from scheduler.ledger.headrecord import Head, HeadRecord, path_for
from scheduler.ledger.receipts import digest
from scheduler.ledger.store import Loss, StoreCorrupt, StoreError, StoreFull, StoreReadOnly

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
HEADROOM = 16 << 20   # bytes the probe allocates: room for many group commits of ordinary receipts
_CORRUPT = {"SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_FORMAT"}
_READ_ONLY = {"SQLITE_READONLY", "SQLITE_PERM", "SQLITE_AUTH"}


def _writable(path: Path) -> bool:
    directory = path.parent
    return os.access(directory, os.W_OK) and (not path.exists() or os.access(path, os.W_OK)) \
        and not os.statvfs(directory).f_flag & os.ST_RDONLY


def _mapped(path: Path, doing: str, exc: sqlite3.Error) -> StoreError:
    """The store's error type for what SQLite said, with the path and the act."""
    name = (getattr(exc, "sqlite_errorname", "") or "").split("_")[:2]
    base = "_".join(name)
    if base == "SQLITE_FULL":
        kind = StoreFull
    elif base in _CORRUPT:
        kind = StoreCorrupt
    elif base in _READ_ONLY or (base in ("SQLITE_CANTOPEN", "SQLITE_IOERR") and not _writable(path)):
        kind = StoreReadOnly
    else:
        kind = StoreError
    if kind is StoreCorrupt:
        return kind(f"{doing} {path}: {exc} (not a Pool ledger, or a damaged one)")
    return kind(f"{doing} {path}: {exc}")


def _connect(path: Path, mode: str) -> sqlite3.Connection:
    try:
        return sqlite3.connect(f"{path.resolve().as_uri()}?mode={mode}", uri=True,
                               isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise _mapped(path, "cannot open", exc) from None


class SqliteStore:
    def __init__(self, path: str | Path, *, create: bool = False, headroom: int = HEADROOM) -> None:
        self.path = Path(path)
        self.headroom = headroom
        if not create and not self.path.is_file():
            raise StoreError(f"no ledger at {self.path}")
        self._lock = threading.Lock()
        self._conn = _connect(self.path, "rwc" if create else "rw")
        self.record = HeadRecord(path_for(self.path))
        try:
            self._prepare()
            self.loss = self._compare(self.record.read())
        except BaseException as exc:
            self._conn.close()
            if isinstance(exc, sqlite3.Error):
                raise _mapped(self.path, "cannot read", exc) from None
            raise

    def _prepare(self) -> None:
        conn = self._conn
        conn.execute("PRAGMA synchronous=FULL")
        (app_id,) = conn.execute("PRAGMA application_id").fetchone()
        if app_id == 0 and conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0:
            conn.executescript(f"BEGIN; {_SCHEMA} PRAGMA application_id={APPLICATION_ID};"
                               f" PRAGMA user_version={SCHEMA_VERSION}; COMMIT;")
        elif app_id != APPLICATION_ID:
            raise StoreCorrupt(f"{self.path} is not a Pool ledger: application_id is not Pool's")
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version != SCHEMA_VERSION:
            raise StoreCorrupt(f"{self.path} is not a Pool ledger: schema version {version}, "
                               f"expected {SCHEMA_VERSION}")
        if conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] != "wal":
            raise StoreReadOnly(f"{self.path}: cannot switch to WAL")

    def _compare(self, recorded: Head | None) -> Loss | None:
        """What the store lost against its record (None: nothing, or no record yet)."""
        if recorded is None or recorded.length == 0:
            return None
        length = self._count()
        if length >= recorded.length:
            row = self._conn.execute("SELECT raw FROM receipts WHERE seq = ?",
                                     (recorded.length - 1,)).fetchone()
            if row is not None and digest(row[0]) == recorded.head:
                return None
        return Loss(recorded.length, recorded.head, length)

    def accept_loss(self) -> None:
        """From now on the store as it is counts: the next append records it."""
        self.loss = None

    def length(self) -> int:
        with self._lock:
            try:
                return self._count()
            except sqlite3.Error as exc:
                raise _mapped(self.path, "cannot read", exc) from None

    def read(self, start: int = 0, stop: int | None = None) -> Iterator[bytes]:
        conn = _connect(self.path, "ro")
        try:
            rows = conn.execute("SELECT raw FROM receipts WHERE seq >= ? AND seq < ? ORDER BY seq",
                                (start, (1 << 63) - 1 if stop is None else stop))
            for (raw,) in rows:
                yield raw
        except sqlite3.Error as exc:
            raise _mapped(self.path, "cannot read", exc) from None
        finally:
            conn.close()

    def append(self, first_seq: int, receipts: Sequence[tuple[str, bytes]]) -> None:
        rows = [(first_seq + i, kind, raw) for i, (kind, raw) in enumerate(receipts)]
        with self._lock:
            self._transaction(lambda: self._insert(first_seq, rows), "cannot append to")
            if self.loss is None and rows:   # a lost history is recorded over only once accepted
                try:
                    self.record.write(Head(first_seq + len(rows), digest(rows[-1][2])))
                except OSError as exc:
                    raise self._os_error(exc, "cannot record the head of") from None

    def _insert(self, first_seq: int, rows: list) -> None:
        if self._count() != first_seq:
            raise StoreError(f"append at {first_seq} but the ledger has moved on")
        self._conn.executemany("INSERT INTO receipts VALUES (?, ?, ?)", rows)

    def probe(self) -> None:
        """A durable write that changes no receipt, as large as the next appends
        may need: the schema version is written again (a WAL frame and a sync,
        as an append makes), then HEADROOM bytes are allocated beside the store
        and freed. StoreFull, StoreReadOnly … if either cannot be done."""
        with self._lock:
            self._transaction(lambda: self._conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}"),
                              "cannot write to")
        room = self.path.with_name(f".{self.path.name}.probe")
        try:
            fd = os.open(room, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.headroom)
            finally:
                os.close(fd)
                room.unlink()
        except OSError as exc:
            raise self._os_error(exc, f"cannot find {self.headroom >> 20} MiB of room beside") from None

    def _transaction(self, work, doing: str) -> None:
        """One IMMEDIATE transaction; SQLite may already have rolled it back
        when it fails (a full disk), so a rollback is tried only if one is open."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                work()
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise _mapped(self.path, doing, exc) from None

    def _os_error(self, exc: OSError, doing: str) -> StoreError:
        kind = {errno.ENOSPC: StoreFull, errno.EDQUOT: StoreFull, errno.EROFS: StoreReadOnly,
                errno.EACCES: StoreReadOnly, errno.EPERM: StoreReadOnly}.get(exc.errno, StoreError)
        return kind(f"{doing} {self.path}: {exc.strerror}")

    def _count(self) -> int:
        row = self._conn.execute("SELECT max(seq) FROM receipts").fetchone()
        return 0 if row[0] is None else row[0] + 1

    def latest(self, kind: str) -> int | None:
        with self._lock:
            try:
                return self._conn.execute("SELECT max(seq) FROM receipts WHERE kind = ?",
                                          (kind,)).fetchone()[0]
            except sqlite3.Error as exc:
                raise _mapped(self.path, "cannot read", exc) from None

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self.record.close()
