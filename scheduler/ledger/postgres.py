"""The shared store: the ledger as one append-only table in PostgreSQL, for a
leader and its standbys (docs/OPERATIONS.md, "High availability").

- `pool_receipts (seq, kind, raw, hash)` in the connection's schema (the
  DSN's `options=-csearch_path=…` picks another). Triggers refuse UPDATE,
  DELETE and TRUNCATE; the role Pool connects as needs only CREATE on the
  schema the first time, then SELECT and INSERT.
- An append is one transaction holding one INSERT … SELECT: it inserts the
  batch only if the stored row before it has exactly the hash the batch's
  first receipt names as prev, and (when leading) only while this session
  holds the ledger's advisory lock. The primary key on seq refuses a second
  writer at the same seq. So two writers can never both extend the ledger,
  and a deposed leader's append fails instead of forking it.
- The write session is never reconnected: losing it loses the lock, and with
  it the right to append (StoreError, then the scheduler steps down). Reads
  use a second session, reconnected on demand, paged by seq.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence

import psycopg
from psycopg import sql

from scheduler.ledger import cose
from scheduler.ledger.dcbor import DcborError
from scheduler.ledger import merkle
from scheduler.ledger.index import STORED_FROM, Claims, LowLevels, Tree, claims_in
from scheduler.ledger.receipts import ReceiptError, digest, read_core
from scheduler.ledger.store import StoreError

LOCK_CLASS = 0x506F6F6C   # "Pool": the advisory lock's high 32 bits; the low ones are the table's oid
SCHEMA_VERSION = 1
PAGE = 2000               # receipts per read query
READ_AGAIN_S = 1.0        # a patient store's reads, while PostgreSQL does not answer, are tried this often
log = logging.getLogger("pool.ledger")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS pool_receipts (
  seq bigint PRIMARY KEY CHECK (seq >= 0),
  kind text NOT NULL,
  raw bytea NOT NULL,
  hash bytea NOT NULL CHECK (length(hash) = 32));
CREATE INDEX IF NOT EXISTS pool_receipts_kind ON pool_receipts (kind, seq);
CREATE TABLE IF NOT EXISTS pool_ledger_meta (key text PRIMARY KEY, value text NOT NULL);
INSERT INTO pool_ledger_meta VALUES ('schema_version', '1') ON CONFLICT DO NOTHING;
CREATE OR REPLACE FUNCTION pool_receipts_append_only() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'the ledger is append-only'; END $$;
DROP TRIGGER IF EXISTS pool_receipts_no_change ON pool_receipts;
CREATE TRIGGER pool_receipts_no_change BEFORE UPDATE OR DELETE ON pool_receipts
  FOR EACH ROW EXECUTE FUNCTION pool_receipts_append_only();
DROP TRIGGER IF EXISTS pool_receipts_no_truncate ON pool_receipts;
CREATE TRIGGER pool_receipts_no_truncate BEFORE TRUNCATE ON pool_receipts
  FOR EACH STATEMENT EXECUTE FUNCTION pool_receipts_append_only();
"""
# Beside the receipts, in their transaction (index.py): the Merkle tree's
# complete subtrees of 16 receipts and up, and the claim index. A ledger made
# before them gets them when a store is next opened on it, computed from its
# receipts in the transaction that creates the tables.
_INDEX = """
CREATE TABLE pool_merkle (level int, idx bigint, hash bytea NOT NULL, PRIMARY KEY (level, idx));
CREATE TABLE pool_claim_receipts (claim text, seq bigint, PRIMARY KEY (claim, seq));
DROP TRIGGER IF EXISTS pool_merkle_no_change ON pool_merkle;
CREATE TRIGGER pool_merkle_no_change BEFORE UPDATE OR DELETE ON pool_merkle
  FOR EACH ROW EXECUTE FUNCTION pool_receipts_append_only();
"""
_NODES = "INSERT INTO pool_merkle SELECT * FROM unnest(%s::int[], %s::bigint[], %s::bytea[])"
_CLAIMS = "INSERT INTO pool_claim_receipts SELECT * FROM unnest(%s::text[], %s::bigint[]) ON CONFLICT DO NOTHING"
CATCH_UP = 4096   # receipts read at a time when the tree is built from stored receipts
# The batch goes in only if it extends the stored head (the row before it has
# the hash its first receipt names; for seq 0 there is no row before) and,
# when fenced, only while this session holds the lock.
_APPEND = """
INSERT INTO pool_receipts (seq, kind, raw, hash)
SELECT * FROM unnest(%(seq)s::bigint[], %(kind)s::text[], %(raw)s::bytea[], %(hash)s::bytea[])
WHERE (SELECT hash FROM pool_receipts WHERE seq = %(before)s) IS NOT DISTINCT FROM %(prev)s
  AND (NOT %(fenced)s OR EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
       AND pid = pg_backend_pid() AND granted AND classid = %(high)s::oid AND objid = %(low)s::oid AND objsubid = 1))
"""
_HOLDER = """
SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s::oid AND l.objid = %s::oid AND l.objsubid = 1
"""


def _prev(raw: bytes) -> bytes:
    try:
        return read_core(cose.parse_whole(raw).payload)[1]
    except (DcborError, ReceiptError) as exc:
        raise StoreError(f"not a receipt: {exc}") from None


class PostgresStore:
    """`application_name` is what other sessions see of this one while it holds
    the lock (pool-scheduler puts its advertised address there); `lease_s` makes
    PostgreSQL end this session once it has been silent that long, releasing the
    lock of a leader that stopped (call `heartbeat` more often than that). A
    `fenced` store appends only while its session holds the lock (`try_lead`).
    A `patient` store's reads outlast PostgreSQL going away (a restart): each
    is tried again every READ_AGAIN_S until it answers or the store is closed,
    so a replay or a follow resumes where it was, having folded nothing twice;
    `waiting` is true meanwhile."""

    def __init__(self, dsn: str, *, create: bool = False, application_name: str = "pool",
                 lease_s: float | None = None, fenced: bool = False, patient: bool = False) -> None:
        self.dsn, self._app = dsn, application_name
        self._lock, self._read_lock = threading.Lock(), threading.Lock()
        self._reader: psycopg.Connection | None = None
        self.patient, self.waiting = patient, False
        self._closed = threading.Event()
        self.fenced, self.leading = fenced, False
        self._lease_ms = None if lease_s is None else max(1, int(lease_s * 1000))
        self._conn = self._session()
        try:
            self._prepare(create)
        except psycopg.Error as exc:
            self._conn.close()
            raise StoreError(f"PostgreSQL ledger: {_reason(exc)}") from None

    def _session(self) -> psycopg.Connection:
        """The write session; with a lease, PostgreSQL ends it once it is silent
        (idle, idle in a transaction, or in one statement) for that long."""
        conn = self._connect()
        if self._lease_ms is not None:
            try:
                for setting in ("idle_session_timeout", "idle_in_transaction_session_timeout",
                                "statement_timeout"):
                    conn.execute(sql.SQL("SET {} = {}").format(sql.Identifier(setting),
                                                               sql.Literal(self._lease_ms)))
            except psycopg.Error as exc:
                conn.close()
                raise StoreError(f"PostgreSQL session: {_reason(exc)}") from None
        return conn

    def reopen(self) -> None:
        """A new write session for a store that does not lead (a standby whose
        session PostgreSQL dropped). A leader's session is its lock: never reopened."""
        if self.leading:
            raise StoreError("a leader's session is its lock and is never reopened")
        with self._lock:
            self._conn.close()
            self._conn = self._session()

    def _connect(self) -> psycopg.Connection:
        # over TCP, a peer that vanished is noticed within about the lease, not minutes
        lease = {} if self._lease_ms is None else {
            "keepalives": 1, "keepalives_idle": max(1, self._lease_ms // 3000), "keepalives_interval": 1,
            "keepalives_count": 3, "tcp_user_timeout": self._lease_ms}
        try:
            return psycopg.connect(self.dsn, autocommit=True, application_name=self._app, connect_timeout=10,
                                   **lease)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL: {_reason(exc)}") from None

    def _prepare(self, create: bool) -> None:
        conn = self._conn
        exists = conn.execute("SELECT to_regclass('pool_receipts') IS NOT NULL").fetchone()[0]
        if not exists and not create:
            raise StoreError("no ledger in this database (schema "
                             f"{conn.execute('SELECT current_schema()').fetchone()[0]})")
        if not exists:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_CLASS << 32,))  # one creator at a time
                conn.execute(_SCHEMA)
        row = conn.execute("SELECT value FROM pool_ledger_meta WHERE key = 'schema_version'").fetchone()
        if row is None or int(row[0]) != SCHEMA_VERSION:
            raise StoreError(f"schema version {row and row[0]}, expected {SCHEMA_VERSION}")
        self._oid = conn.execute("SELECT 'pool_receipts'::regclass::oid").fetchone()[0]
        if conn.execute("SELECT to_regclass('pool_claim_receipts') IS NULL").fetchone()[0]:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_CLASS << 32,))   # one at a time
                if conn.execute("SELECT to_regclass('pool_claim_receipts') IS NULL").fetchone()[0]:
                    conn.execute(_INDEX)
                    self._index_all(conn)
        self._low = LowLevels(lambda start, stop: [bytes(raw) for (raw,) in self._query(lambda c: c.execute(
            "SELECT raw FROM pool_receipts WHERE seq >= %s AND seq < %s ORDER BY seq", (start, stop)).fetchall())])
        self.tree = Tree(self.tree_node)

    def _index_all(self, conn: psycopg.Connection) -> None:
        """The tree's stored nodes and the claim index of every receipt (a
        ledger made before them), in the transaction that creates the tables."""
        frontier, at = merkle.Frontier(), 0
        while raws := [bytes(raw) for (raw,) in conn.execute(
                "SELECT raw FROM pool_receipts WHERE seq >= %s AND seq < %s ORDER BY seq",
                (at, at + CATCH_UP)).fetchall()]:
            nodes = [n for n in frontier.extend(map(merkle.leaf_hash, raws)) if n[0] >= STORED_FROM]
            self._index(conn, nodes, claims_in(at, raws))
            at += len(raws)

    @property
    def lock_key(self) -> int:
        """The advisory lock that makes a scheduler the leader of this ledger."""
        return LOCK_CLASS << 32 | self._oid

    # -- leadership ---------------------------------------------------------

    def try_lead(self) -> bool:
        """Take the ledger's lock on the write session if nobody holds it; from
        then on, appends succeed only while the session (and so the lock) lasts."""
        take = lambda c: c.execute("SELECT pg_try_advisory_lock(%s)", (self.lock_key,)).fetchone()[0]  # noqa: E731
        with self._lock:
            try:
                won = take(self._conn)
            except psycopg.OperationalError:
                if self.leading:
                    raise StoreError("take the leader lock failed: the leader's session is gone") from None
                self._conn.close()          # a standby's session PostgreSQL ended (idle while replaying)
                self._conn = self._session()
                won = self._write("take the leader lock", take)
            except psycopg.Error as exc:
                raise StoreError(f"take the leader lock failed: {_reason(exc)}") from None
            self.leading = self.leading or won
            return won

    def heartbeat(self) -> None:
        """A round trip on the write session (StoreError once it is gone):
        keeps the lease, and tells a leader that it has lost it."""
        with self._lock:
            self._write("keep the lease", lambda c: c.execute("SELECT 1"))

    def leader(self) -> str | None:
        """The application_name of the session holding the lock, if any."""
        return self._query(lambda c: (c.execute(_HOLDER, (LOCK_CLASS, self._oid)).fetchone() or (None,))[0])

    # -- the Store interface ------------------------------------------------

    def length(self) -> int:
        return self._query(lambda c: c.execute("SELECT coalesce(max(seq) + 1, 0) FROM pool_receipts").fetchone()[0])

    def read(self, start: int = 0, stop: int | None = None) -> Iterator[bytes]:
        at, end = start, (1 << 63) - 1 if stop is None else stop
        while at < end:
            rows = self._query(lambda c: c.execute(
                "SELECT raw FROM pool_receipts WHERE seq >= %s AND seq < %s ORDER BY seq LIMIT %s",
                (at, end, PAGE)).fetchall())
            for (raw,) in rows:
                yield raw
            if len(rows) < PAGE:
                return
            at += len(rows)

    def append(self, first_seq: int, receipts: Sequence[tuple[str, bytes]], claims: Claims | None = None) -> None:
        """`claims`: the (claim, seq) index rows of these receipts; None reads them from the receipts."""
        raws = [raw for _, raw in receipts]
        claims = claims_in(first_seq, raws) if claims is None else claims
        args = {"seq": list(range(first_seq, first_seq + len(raws))), "kind": [kind for kind, _ in receipts],
                "raw": raws, "hash": [digest(raw) for raw in raws], "before": first_seq - 1,
                "prev": _prev(raws[0]) if first_seq else None, "fenced": self.fenced,
                "high": LOCK_CLASS, "low": self._oid}

        def insert(conn: psycopg.Connection) -> int:
            with conn.transaction():
                inserted = conn.execute(_APPEND, args).rowcount
                if inserted == len(raws):   # nothing else goes in with a refused batch
                    self._index(conn, nodes, claims)
                return inserted
        with self._lock:
            try:
                after, nodes = self.tree.closing(first_seq, raws)
                inserted = self._write(f"append at {first_seq}", insert)
                if inserted == len(raws):
                    self.tree.moved(after)
            except StoreError as exc:
                if "duplicate key" in str(exc):
                    raise StoreError(f"append at {first_seq} but the ledger has moved on") from None
                raise
        if inserted != len(raws):
            if self.fenced and not self._holds_lock():
                raise StoreError(f"append at {first_seq} refused: this session does not hold the leader lock")
            raise StoreError(f"append at {first_seq} but the ledger has moved on")

    @staticmethod
    def _index(conn: psycopg.Connection, nodes, claims) -> None:
        if nodes:
            conn.execute(_NODES, [list(column) for column in zip(*nodes)])
        if claims:
            conn.execute(_CLAIMS, [list(column) for column in zip(*claims)])

    # -- the tree and the claim index (read side) ---------------------------

    def tree_node(self, level: int, index: int) -> bytes:
        if level < STORED_FROM:
            found = self._low.node(level, index)
        else:
            row = self._query(lambda c: c.execute("SELECT hash FROM pool_merkle WHERE level = %s AND idx = %s",
                                                  (level, index)).fetchone())
            found = None if row is None else bytes(row[0])
        if found is None:
            raise StoreError(f"PostgreSQL ledger: no Merkle node ({level}, {index})")
        return found

    def tree_nodes(self, keys: list[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        """Many nodes in one read (what a proof needs); StoreError if one is not stored."""
        found = {key: self._low.node(*key) for key in keys if key[0] < STORED_FROM}
        high = [key for key in keys if key[0] >= STORED_FROM]
        if high:
            rows = self._query(lambda c: c.execute(
                "SELECT m.level, m.idx, m.hash FROM pool_merkle m JOIN unnest(%s::int[], %s::bigint[]) AS k(level, idx)"
                " ON m.level = k.level AND m.idx = k.idx", ([k[0] for k in high], [k[1] for k in high])).fetchall())
            found.update(((level, idx), bytes(value)) for level, idx, value in rows)
        missing = [key for key in keys if found.get(key) is None]
        if missing:
            raise StoreError(f"PostgreSQL ledger: no Merkle node {missing[0]}")
        return found

    def tree_rows(self) -> list[tuple[int, int, bytes]]:
        """Every stored node (level, index, hash); verify checks them against the receipts."""
        return [(level, idx, bytes(h)) for level, idx, h in self._query(
            lambda c: c.execute("SELECT level, idx, hash FROM pool_merkle").fetchall())]

    def claim_seqs(self, claim: str) -> list[int]:
        return [seq for (seq,) in self._query(lambda c: c.execute(
            "SELECT seq FROM pool_claim_receipts WHERE claim = %s ORDER BY seq", (claim,)).fetchall())]

    def _holds_lock(self) -> bool:
        with self._lock:
            try:
                return self._conn.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
                    " AND granted AND classid = %s::oid AND objid = %s::oid", (LOCK_CLASS, self._oid)).fetchone()[0] > 0
            except psycopg.Error:
                return False

    def latest(self, kind: str) -> int | None:
        return self._query(lambda c: c.execute("SELECT max(seq) FROM pool_receipts WHERE kind = %s",
                                               (kind,)).fetchone()[0])

    def close(self) -> None:
        self._closed.set()   # first: a patient read waiting for PostgreSQL gives up now
        with self._lock:
            self._conn.close()
        with self._read_lock:
            if self._reader is not None:
                self._reader.close()

    # -- sessions -----------------------------------------------------------

    def _write(self, what: str, run):
        """On the write session, which is never reconnected (it is the lock)."""
        try:
            return run(self._conn)
        except psycopg.Error as exc:
            raise StoreError(f"{what} failed: {_reason(exc)}") from None

    def _query(self, run):
        """On the read session; one that PostgreSQL dropped (a restart) is
        opened again and the read tried once more (reads change nothing). A
        patient store goes on trying every READ_AGAIN_S while PostgreSQL cannot
        be reached, saying so once, until it answers or the store is closed."""
        while True:
            if self._closed.is_set():
                raise StoreError("the PostgreSQL ledger was closed while it was being read")
            try:
                answer = self._query_once(run)
            except Unreachable as exc:
                if not self.patient:
                    raise
                if not self.waiting:
                    log.warning("%s; reading again every %g s until PostgreSQL answers", exc, READ_AGAIN_S)
                    self.waiting = True
                self._closed.wait(READ_AGAIN_S)
                continue
            if self.waiting:
                log.warning("PostgreSQL answers reads again")
                self.waiting = False
            return answer

    def _query_once(self, run):
        with self._read_lock:
            for attempt in (1, 2):
                try:
                    if self._reader is None or self._reader.closed:
                        self._reader = self._connect()
                    return run(self._reader)
                except StoreError as exc:   # cannot connect
                    raise Unreachable(str(exc)) from None
                except psycopg.Error as exc:
                    if self._reader is not None:
                        self._reader.close()
                    self._reader = None
                    if attempt == 2 or not isinstance(exc, psycopg.OperationalError):
                        kind = Unreachable if isinstance(exc, psycopg.OperationalError) else StoreError
                        raise kind(f"PostgreSQL read failed: {_reason(exc)}") from None


class Unreachable(StoreError):
    """PostgreSQL could not be reached for a read (down, restarting, cut off)."""


def _reason(exc: psycopg.Error) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
