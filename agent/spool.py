"""The durable spool: every window is written here before the stream may
offer it, and removed only once the scheduler has acknowledged it, so a crash,
a restart or a scheduler outage loses nothing the agent measured.

One SQLite file (`state_dir/spool.sqlite`, WAL, synchronous=FULL) holds, in
one transaction per window boundary:

- the windows not yet acknowledged, each as the `pool.v1.Window` it is sent as;
- each device's last boundary reading (`agent.counters.Last`), so a restarted
  agent continues every device from exactly where its last window ended;
- the highest window seq handed out: the spool numbers the windows it takes,
  so numbers survive restarts and never repeat.

The spool is bounded (`spool.max_windows`). When it is full, the oldest
windows of each device are merged into one gap record (`GAP_SPOOL_OVERFLOW`)
spanning exactly what was merged and saying how many measured windows it
replaced: counted in pool_agent_windows_lost_total and
pool_agent_unaccounted_seconds_total, and logged once per episode. A window
that may have been offered to the scheduler and not yet answered for is
never merged (the scheduler may be counting it, even after its stream died);
at most `in_flight` windows are offered at a time on a stream, so that part
is small.

A window the scheduler keeps refusing is replaced, in place and durably, by a
`GAP_REFUSED` gap with the same seq, device and span (`refuse`; when, is
agent/refusals.py's call).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from pathlib import Path

from agent.counters import Last
from agent.metrics import AgentMetrics
from agent.windows import Window
from protos.energy import NS_PER_S, GapReason, Grade, worst
from protos.pool.v1 import agent_pb2

log = logging.getLogger(__name__)
FILE = "spool.sqlite"
IN_FLIGHT = 5_000   # windows offered to the scheduler and not yet acknowledged, at most

SCHEMA = """
CREATE TABLE IF NOT EXISTS windows (
  seq      INTEGER PRIMARY KEY,
  device   TEXT NOT NULL,
  start_ns INTEGER NOT NULL,
  end_ns   INTEGER NOT NULL,
  uj       INTEGER,                -- NULL: a gap
  lost     INTEGER NOT NULL,       -- measured windows merged into this gap
  body     BLOB NOT NULL           -- the pool.v1.Window, as sent
);
CREATE TABLE IF NOT EXISTS devices (
  device   TEXT PRIMARY KEY,
  t_ns     INTEGER NOT NULL,       -- monotonic, on the boot `identity` names
  unix_ns  INTEGER NOT NULL,
  counters TEXT,                   -- JSON list of µJ; NULL when that read failed
  identity TEXT                    -- the counter epoch; NULL: never carries over
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


class SpoolError(Exception):
    """The spool cannot be opened or written; the message names the file."""


class Spool:
    def __init__(self, path: Path, max_windows: int, metrics: AgentMetrics, in_flight: int = IN_FLIGHT):
        self.path, self._max, self._metrics, self._in_flight = path, max_windows, metrics, in_flight
        self._cond = threading.Condition(threading.RLock())
        try:
            fresh = not path.exists()
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)
            if fresh:   # numbers from a fresh spool are provisional until the scheduler says where it is
                self._db.execute("INSERT OR IGNORE INTO meta VALUES ('based', 0)")
            self._seq = self._meta("seq")
            self._count = self._db.execute("SELECT COUNT(*) FROM windows").fetchone()[0]
        except sqlite3.Error as exc:
            raise SpoolError(f"spool {path}: {exc}") from None
        self.acked = 0         # rows at or below it are deleted by the next transaction (acks cost no fsync)
        # the highest seq ever offered to a scheduler: never merged, since a stream that died
        # may still be counted after a new Register answered (only acks make them safe)
        self._offered = 0
        self._session_top = 0  # the highest seq offered on the current stream, for the in-flight bound
        self._episode: list[int] | None = None   # overflow: [windows, µJ, ns] lost so far
        self._closed = False   # a stream's request thread may still ask after close(): it gets nothing
        metrics.buffered.set_function(self.__len__)
        metrics.window_lag.set_function(self._lag_s)

    def _meta(self, key: str, default: int = 0) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else row[0]

    def __len__(self) -> int:
        """Windows not yet acknowledged."""
        with self._cond:
            return self._db.execute("SELECT COUNT(*) FROM windows WHERE seq > ?", (self.acked,)).fetchone()[0]

    # -- the sampler's side ------------------------------------------------

    def last_readings(self) -> dict[str, Last]:
        with self._cond:
            rows = self._db.execute("SELECT device, t_ns, unix_ns, counters, identity FROM devices").fetchall()
        return {d: Last(t, u, None if c is None else tuple(json.loads(c)), i) for d, t, u, c, i in rows}

    def append(self, windows: list[Window], lasts: dict[str, Last]) -> list[agent_pb2.Window]:
        """Number and store a boundary's windows with the readings they end
        at, in one transaction; the windows as stored."""
        with self._cond:
            stored = []
            for w in windows:
                self._seq += 1
                msg = w.as_proto()
                msg.seq = self._seq
                stored.append(msg)
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._count -= self._db.execute("DELETE FROM windows WHERE seq <= ?", (self.acked,)).rowcount
                self._db.executemany("INSERT INTO windows VALUES (?, ?, ?, ?, ?, ?, ?)", [
                    (m.seq, m.device_id, m.start_ns, m.end_ns, m.uj if m.HasField("uj") else None, m.lost_windows,
                     m.SerializeToString()) for m in stored])
                self._db.executemany("INSERT OR REPLACE INTO devices VALUES (?, ?, ?, ?, ?)", [
                    (d, last.t_ns, last.unix_ns, None if last.counters_uj is None else json.dumps(last.counters_uj),
                     last.identity) for d, last in lasts.items()])
                self._db.execute("INSERT OR REPLACE INTO meta VALUES ('seq', ?)", (self._seq,))
                self._count += len(stored)
                merged = self._merge_oldest(self._count - self._max) if self._count > self._max else None
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise SpoolError(f"spool {self.path}: {exc}") from None
            if merged is None and self._episode is not None:
                self._end_episode()
            self._cond.notify_all()
            return stored

    def _merge_oldest(self, excess: int) -> int:
        """Merge the oldest windows not offered into one gap per device until
        `excess` rows are gone (or nothing more may be merged); rows removed."""
        by_device: dict[str, list[tuple]] = {}
        removed = 0
        oldest = self._db.execute("SELECT seq, device, start_ns, end_ns, uj, lost, body FROM windows "
                                  "WHERE seq > ? ORDER BY seq", (self._offered,))
        for row in oldest:
            rows = by_device.setdefault(row[1], [])
            rows.append(row)
            removed += len(rows) > 1
            if removed >= excess:
                break
        oldest.close()
        for device, rows in by_device.items():
            if len(rows) > 1:
                self._merge(device, rows)
        self._count -= removed
        return removed

    def _merge(self, device: str, rows: list[tuple]) -> None:
        measured = [r for r in rows if r[4] is not None]
        lost = len(measured) + sum(r[5] for r in rows if r[4] is None)
        grade = worst(Grade(agent_pb2.Window.FromString(r[6]).grade) for r in rows)
        gap = agent_pb2.Window(device_id=device, seq=rows[-1][0], start_ns=rows[0][2], end_ns=rows[-1][3],
                               grade=int(grade), gap_reason=GapReason.SpoolOverflow, lost_windows=lost)
        self._db.executemany("DELETE FROM windows WHERE seq = ?", [(r[0],) for r in rows])
        self._db.execute("INSERT INTO windows VALUES (?, ?, ?, ?, NULL, ?, ?)",
                         (gap.seq, device, gap.start_ns, gap.end_ns, lost, gap.SerializeToString()))
        uj, ns = sum(r[4] for r in measured), sum(r[3] - r[2] for r in measured)
        self._metrics.lost(device, len(measured), ns)
        if self._episode is None:
            self._episode = [0, 0, 0]
        self._episode[0] += len(measured)
        self._episode[1] += uj
        self._episode[2] += ns

    def _end_episode(self) -> None:
        windows, uj, ns = self._episode
        self._episode = None
        log.warning("spool was full (%d windows): %d measured windows were merged into gap records; "
                    "%d µJ over %.3f s never reach the scheduler as figures", self._max, windows, uj, ns / NS_PER_S)

    # -- the stream's side -------------------------------------------------

    def offer(self, after: int, limit: int, timeout_s: float, cut: int | None = None) -> list[agent_pb2.Window]:
        """Up to `limit` windows above `after`, waiting up to `timeout_s` for
        one; none while `in_flight` windows already wait for their ack. With
        `cut`, a batch never holds windows on both sides of seq `cut` (the
        windows before a refused one go on their own, stream.py)."""
        with self._cond:
            rows = self._offerable(after, limit)
            if not rows and not self._closed:
                self._cond.wait(timeout_s)
                rows = self._offerable(after, limit)
            if cut is not None and rows and rows[0][0] < cut:
                rows = [row for row in rows if row[0] < cut]
            if rows:
                self._offered = max(self._offered, rows[-1][0])
                self._session_top = max(self._session_top, rows[-1][0])
            return [agent_pb2.Window.FromString(body) for _, body in rows]

    def _offerable(self, after: int, limit: int) -> list[tuple[int, bytes]]:
        if self._closed:   # its database is closed: nothing more is offered
            return []
        after = max(after, self.acked)
        unanswered = self._db.execute("SELECT COUNT(*) FROM windows WHERE seq > ? AND seq <= ?",
                                      (self.acked, self._session_top)).fetchone()[0]
        room = min(limit, self._in_flight - unanswered)
        if room <= 0:
            return []
        return self._db.execute("SELECT seq, body FROM windows WHERE seq > ? ORDER BY seq LIMIT ?",
                                (after, room)).fetchall()

    def refuse(self, seq: int) -> agent_pb2.Window | None:
        """Replace measured window `seq`, which the scheduler keeps refusing
        (stream.py), by a GAP_REFUSED gap with its seq, device, span and grade,
        no figure and lost_windows 1, durably; counted in the metrics. The gap,
        or None when `seq` is not a measured window waiting for its ack (a gap
        already: a gap is refused for its seq, device or span, which a
        replacement would keep)."""
        with self._cond:
            row = self._db.execute("SELECT body FROM windows WHERE seq = ? AND seq > ? AND uj IS NOT NULL",
                                   (seq, self.acked)).fetchone()
            if row is None:
                return None
            window = agent_pb2.Window.FromString(row[0])
            gap = agent_pb2.Window(device_id=window.device_id, seq=seq, start_ns=window.start_ns,
                                   end_ns=window.end_ns, grade=window.grade, gap_reason=GapReason.Refused,
                                   lost_windows=1)
            try:   # one statement, its own transaction: the window or the gap, never neither
                self._db.execute("UPDATE windows SET uj = NULL, lost = 1, body = ? WHERE seq = ?",
                                 (gap.SerializeToString(), seq))
            except sqlite3.Error as exc:
                raise SpoolError(f"spool {self.path}: {exc}") from None
            self._metrics.refused(window.device_id, window.end_ns - window.start_ns)
            return gap

    def ack(self, seq: int) -> None:
        """The scheduler has counted every window up to `seq`: forget them
        (deleted with the next boundary's transaction; should that be lost in
        a crash, they are resent and the scheduler counts them once)."""
        with self._cond:
            if seq > self.acked:
                self.acked = seq
                self._cond.notify_all()

    def printed(self, seq: int) -> None:
        """--stdout: every window up to `seq` is printed; delete them now, in
        their own commit, so a restart reprints (by seq) only what a crash
        caught between storing and printing."""
        with self._cond:
            self.acked = max(self.acked, seq)
            self._delete_through(self.acked)

    def resolved(self, acked: int) -> None:
        """Register answered: the scheduler has counted up to `acked` and
        nothing offered before is in flight any more. A fresh spool (state
        lost) renumbers its windows above `acked`, which it never sent."""
        with self._cond:
            if not self._meta("based", 1):
                self._rebase(acked)
            if self._seq < acked:
                self._seq = acked
                self._db.execute("INSERT OR REPLACE INTO meta VALUES ('seq', ?)", (acked,))
            self.acked = max(self.acked, acked)
            self._offered = max(self._offered, self.acked)
            self._session_top = self.acked
            self._delete_through(self.acked)
            self._cond.notify_all()

    def _rebase(self, acked: int) -> None:
        rows = self._db.execute("SELECT seq, body FROM windows ORDER BY seq").fetchall()
        shift = acked if rows and rows[0][0] <= acked else 0
        self._db.execute("BEGIN IMMEDIATE")
        if shift:
            self._db.execute("DELETE FROM windows")
            for seq, body in rows:
                msg = agent_pb2.Window.FromString(body)
                msg.seq = seq + shift
                self._db.execute("INSERT INTO windows VALUES (?, ?, ?, ?, ?, ?, ?)",
                                 (msg.seq, msg.device_id, msg.start_ns, msg.end_ns,
                                  msg.uj if msg.HasField("uj") else None, msg.lost_windows, msg.SerializeToString()))
            self._seq += shift
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('seq', ?)", (self._seq,))
            log.warning("fresh spool: renumbered %d windows above seq %d, which the scheduler has counted",
                        len(rows), acked)
        self._db.execute("INSERT OR REPLACE INTO meta VALUES ('based', 1)")
        self._db.execute("COMMIT")

    def _delete_through(self, seq: int) -> None:
        try:
            gone = self._db.execute("DELETE FROM windows WHERE seq <= ?", (seq,)).rowcount
        except sqlite3.Error as exc:
            raise SpoolError(f"spool {self.path}: {exc}") from None
        self._count -= gone

    def unacknowledged(self) -> list[agent_pb2.Window]:
        with self._cond:
            rows = self._db.execute("SELECT body FROM windows WHERE seq > ? ORDER BY seq", (self.acked,)).fetchall()
        return [agent_pb2.Window.FromString(b) for (b,) in rows]

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
            if self._episode is not None:
                self._end_episode()
            self._delete_through(self.acked)
            self._db.close()

    def _rollback(self) -> None:
        try:
            self._db.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        self._seq = self._meta("seq")
        self._count = self._db.execute("SELECT COUNT(*) FROM windows").fetchone()[0]

    def _lag_s(self) -> float:
        """Age of the oldest window not acknowledged (read when Prometheus scrapes)."""
        with self._cond:
            oldest = self._db.execute("SELECT end_ns FROM windows WHERE seq > ? ORDER BY seq LIMIT 1",
                                      (self.acked,)).fetchone()
        return 0 if oldest is None else max(0, time.time_ns() - oldest[0]) / NS_PER_S
