"""One host's batch of windows: the `windows` receipt's body, its columns as
a record (`Windows`), and how a protobuf batch becomes them.

The `windows` body is column by column, so that building, normalizing and
encoding a batch costs a few list operations rather than a map per window:

    {"worker": host,
     "device": [str], "seq": [int], "start_ns": [int], "end_ns": [int],
     "uj": [int | null], "grade": [grade name], "shares": [int],
     "occupant": [str], "share_uj": [int], "share_grade": [grade name]}

The first seven lists have one entry per window, in increasing seq; "shares"
is how many shares each window has, and those shares follow one another, in
window order, in the three share lists.

A batch with a gap in it (a window with no figure) also has two more
per-window columns, absent otherwise (and in bodies written before them):

     "gap": [GapReason name | null], "lost": [int]

"gap" names why each window has no figure (null for a window with one, and
for a gap from an agent that gave no reason); "lost" counts the measured
windows an agent merged into a spool-overflow gap. Gaps are folded into gap
records: `poolctl splits` reports each device's unaccounted time beside its
µJ, and the metrics count them per host.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from itertools import chain, repeat
from operator import attrgetter
from typing import Any, NamedTuple

from protos.energy import GapReason, Grade
from protos.pool.v1 import agent_pb2

WINDOWS = "windows"          # the receipt kind
CPU_PREFIX = "cpu:"          # CPU package devices are "cpu:<index>"
GRADES = Grade.__members__   # grade name -> Grade
GAP_NAMES = {int(r): r.name for r in GapReason}   # wire value -> name in the body
UNKNOWN_GAP = "Unknown"      # a gap whose agent gave no reason
_PER_WINDOW = 7              # Windows' first columns have an entry per window, the next three one per share
_SHARES = 10                 # after them, the optional per-window gap columns


class Windows(NamedTuple):
    """One host's batch, as the body's columns (grades by name)."""

    device: list[str]
    seq: list[int]
    start_ns: list[int]
    end_ns: list[int]
    uj: list[int | None]
    grade: list[str]
    shares: list[int]
    occupant: list[str]
    share_uj: list[int]
    share_grade: list[str]
    gap: list[str | None] | None = None   # per window, only in a batch with a gap in it
    lost: list[int] | None = None

    def window_of_shares(self) -> list[int]:
        """The index of each share's window."""
        return list(chain.from_iterable(map(repeat, range(len(self.shares)), self.shares)))

    def per_share(self, column: list) -> list:
        """A per-window column with each window's entry once for each of its
        shares: the column itself when every window has one share (a sole
        occupant's, the usual window)."""
        if len(self.occupant) == len(self.shares) and self.shares == [1] * len(self.shares):
            return column
        return list(map(column.__getitem__, self.window_of_shares()))

    def since(self, seq: int) -> Windows:
        """The windows above `seq` (seqs increase within a batch)."""
        first = bisect_right(self.seq, seq)
        if not first:
            return self
        skipped = sum(self.shares[:first])
        return type(self)(*(column[first:] for column in self[:_PER_WINDOW]),
                       *(column[skipped:] for column in self[_PER_WINDOW:_SHARES]),
                       *(None if column is None else column[first:] for column in self[_SHARES:]))

    def gaps(self) -> list[tuple[int, str, int]]:
        """(index, reason name, lost windows) of each window with no figure."""
        if None not in self.uj:
            return []
        reasons, lost = self.gap or repeat(None), self.lost or repeat(0)
        return [(i, reason or UNKNOWN_GAP, n) for i, (uj, reason, n) in enumerate(zip(self.uj, reasons, lost))
                if uj is None]


class WireWindows(Windows):
    """A batch's columns as read from its protobuf messages
    (batch_columns): every item is of the type its field declares,
    text (the TEXT columns) or an integer within uint64, or None where a
    field may be unset; window_body takes such columns without looking at
    each item."""

    __slots__ = ()


TEXT = frozenset({"worker", "device", "grade", "occupant", "share_grade", "gap"})   # the body's text columns


def windows_body(worker: str, windows: Windows) -> dict[str, Any]:
    body = {"worker": worker, **windows._asdict()}
    for optional in Windows._fields[_SHARES:]:
        if body[optional] is None:
            del body[optional]
    return body


def windows_from_body(body: Mapping[str, Any]) -> tuple[str, Windows]:
    return body["worker"], Windows(*(body[name] for name in Windows._fields[:_SHARES]),
                                   *(body.get(name) for name in Windows._fields[_SHARES:]))


_GRADE_NAMES = {int(g): g.name for g in Grade}   # a wire value outside these becomes None


def batch_columns(batch: agent_pb2.WindowBatch) -> tuple[WireWindows, list[int], list[int | None]]:
    """A batch straight into the body's columns, a field at a time at C speed
    (no object per window), and beside them two columns that are checked, not
    recorded: each window's occupancy version (the shares it produced are
    recorded) and its stated mean_uw (None where unset; uj and the span give
    it). Unchecked: see evidence.py. A gap reason the contract does not name
    is kept as its number, in text, for the evidence rules to refuse."""
    windows = list(batch.windows)   # one wrapper per message: each pass over the field would make new ones
    shares = _column(windows, "shares")
    flat = list(chain.from_iterable(shares))
    uj = _column(windows, "uj")
    if 0 in uj:   # an unset figure reads 0: ask only then
        uj = [u if u or w.HasField("uj") else None for u, w in zip(uj, windows)]
    gap = None
    reasons, lost = _column(windows, "gap_reason"), _column(windows, "lost_windows")
    if None in uj or any(reasons) or any(lost):   # the gap columns exist only in a batch with a gap (or a bad window)
        gap = [GAP_NAMES.get(r, str(r)) if r else None for r in reasons]
    else:
        lost = None
    mean = _column(windows, "mean_uw")
    if 0 in mean:   # likewise
        mean = [m if m or w.HasField("mean_uw") else None for m, w in zip(mean, windows)]
    return (WireWindows(_column(windows, "device_id"), _column(windows, "seq"), _column(windows, "start_ns"),
                        _column(windows, "end_ns"), uj, _grades(windows), list(map(len, shares)),
                        _column(flat, "occupant"), _column(flat, "uj"), _grades(flat), gap, lost),
            _column(windows, "occupancy_version"), mean)


def _column(messages: list, field: str) -> list:
    return list(map(attrgetter(field), messages))


def _grades(messages: list) -> list[str | None]:
    return list(map(_GRADE_NAMES.get, _column(messages, "grade")))
