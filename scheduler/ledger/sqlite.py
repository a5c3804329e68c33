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
from scheduler.ledger import merkle
from scheduler.ledger.index import STORED_FROM, Claims, LowLevels, Tree, claims_in
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
# Beside the receipts, written in their transaction (index.py): the Merkle
# tree's complete subtrees of 16 receipts and up, and the claim index. A store
# made before them gets them when it is next opened for writing, computed from
# its receipts in the transaction that creates the tables.
_INDEX = (
    "CREATE TABLE merkle (level INTEGER, idx INTEGER, hash BLOB NOT NULL, PRIMARY KEY (level, idx)) WITHOUT ROWID",
    "CREATE TABLE claim_receipts (claim TEXT, seq INTEGER, PRIMARY KEY (claim, seq)) WITHOUT ROWID",
    "CREATE TRIGGER merkle_no_update BEFORE UPDATE ON merkle"
    " BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END",
    "CREATE TRIGGER merkle_no_delete BEFORE DELETE ON merkle"
    " BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END",
)
CATCH_UP = 4096   # receipts read at a time when a store's tree is built from its receipts
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


def _create_private(path: Path) -> None:
    """A new ledger file is the owner's alone (0600), whoever starts the scheduler and
    whatever its umask; SQLite gives its -wal and -shm files the same mode."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreReadOnly(f"cannot create {path}: {exc.strerror}") from None


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
        self._lock, self._read_lock = threading.Lock(), threading.Lock()
        self._reader: sqlite3.Connection | None = None
        if create:
            _create_private(self.path)
        self._conn = _connect(self.path, "rwc" if create else "rw")
        self.record = HeadRecord(path_for(self.path))
        try:
            self._prepare()
            self.loss = self._compare(self.record.read())
            self._low = LowLevels(lambda start, stop: [raw for (raw,) in self._reading(
                "SELECT raw FROM receipts WHERE seq >= ? AND seq < ? ORDER BY seq", (start, stop))])
            self.tree = Tree(self.tree_node)
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
        if conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'claim_receipts'").fetchone()[0] == 0:
            try:
                self._index_all()
            except StoreReadOnly:
                pass   # a read-only copy of an older store: its receipts read and verify; it has no tree

    def _index_all(self) -> None:
        """The tree's stored nodes and the claim index of every receipt, for a
        store made before them: in one transaction with the tables themselves."""
        def fill() -> None:
            for statement in _INDEX:
                self._conn.execute(statement)
            frontier, at = merkle.Frontier(), 0
            while raws := [raw for (raw,) in self._conn.execute(
                    "SELECT raw FROM receipts WHERE seq >= ? AND seq < ? ORDER BY seq", (at, at + CATCH_UP))]:
                nodes = [n for n in frontier.extend(map(merkle.leaf_hash, raws)) if n[0] >= STORED_FROM]
                self._index(nodes, claims_in(at, raws))
                at += len(raws)
        self._transaction(fill, "cannot index")

    def _compare(self, recorded: Head | None) -> Loss | None:
        """What the store lost against its record (None: nothing, or no record yet)."""
        if recorded is None and self.record.unreadable:
            return Loss(0, bytes(32), self._count(), unreadable=True)
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

    def append(self, first_seq: int, receipts: Sequence[tuple[str, bytes]], claims: Claims | None = None) -> None:
        """`claims`: the (claim, seq) index rows of these receipts; None reads them from the receipts."""
        rows = [(first_seq + i, kind, raw) for i, (kind, raw) in enumerate(receipts)]
        raws = [raw for _, _, raw in rows]
        with self._lock:
            after, nodes = self.tree.closing(first_seq, raws)
            claims = claims_in(first_seq, raws) if claims is None else claims
            self._transaction(lambda: (self._insert(first_seq, rows), self._index(nodes, claims)),
                              "cannot append to")
            self.tree.moved(after)
            if self.loss is None and rows:   # a lost history is recorded over only once accepted
                try:
                    self.record.write(Head(first_seq + len(rows), digest(rows[-1][2])))
                except OSError as exc:
                    raise self._os_error(exc, "cannot record the head of") from None

    def _insert(self, first_seq: int, rows: list) -> None:
        if self._count() != first_seq:
            raise StoreError(f"append at {first_seq} but the ledger has moved on")
        self._conn.executemany("INSERT INTO receipts VALUES (?, ?, ?)", rows)

    def _index(self, nodes, claims) -> None:
        self._conn.executemany("INSERT INTO merkle VALUES (?, ?, ?)", nodes)
        self._conn.executemany("INSERT OR IGNORE INTO claim_receipts VALUES (?, ?)", claims)

    # -- the tree and the claim index (read side) ---------------------------

    def _reading(self, query: str, args: tuple) -> list:
        with self._read_lock:
            if self._reader is None:
                self._reader = _connect(self.path, "ro")
            try:
                return self._reader.execute(query, args).fetchall()
            except sqlite3.Error as exc:
                raise _mapped(self.path, "cannot read", exc) from None

    def tree_node(self, level: int, index: int) -> bytes:
        """The complete subtree (level, index); StoreError if it is not stored."""
        if level < STORED_FROM:
            found = self._low.node(level, index)
        else:
            rows = self._reading("SELECT hash FROM merkle WHERE level = ? AND idx = ?", (level, index))
            found = rows[0][0] if rows else None
        if found is None:
            raise StoreError(f"{self.path}: no Merkle node ({level}, {index})")
        return found

    def tree_nodes(self, keys: list[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        """Many nodes in one read (what a proof needs); StoreError if one is not stored."""
        found = {key: self._low.node(*key) for key in keys if key[0] < STORED_FROM}
        high = [key for key in keys if key[0] >= STORED_FROM]
        if high:
            values = ", ".join("(?, ?)" for _ in high)
            found.update(((level, idx), value) for level, idx, value in self._reading(   # a join: by the key
                f"SELECT m.level, m.idx, m.hash FROM (VALUES {values}) AS k JOIN merkle AS m"
                " ON m.level = k.column1 AND m.idx = k.column2", tuple(x for key in high for x in key)))
        missing = [key for key in keys if found.get(key) is None]
        if missing:
            raise StoreError(f"{self.path}: no Merkle node {missing[0]}")
        return found

    def tree_rows(self) -> list[tuple[int, int, bytes]]:
        """Every stored node (level, index, hash); verify checks them against the receipts."""
        try:
            return self._reading("SELECT level, idx, hash FROM merkle", ())
        except StoreError:
            return []   # a read-only older store without the table

    def claim_seqs(self, claim: str) -> list[int]:
        return [seq for (seq,) in self._reading("SELECT seq FROM claim_receipts WHERE claim = ? ORDER BY seq",
                                                (claim,))]

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
        with self._read_lock:   # first: the writer, closing last, checkpoints and removes the WAL
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        with self._lock:
            self._conn.close()
            self.record.close()
