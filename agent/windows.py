"""Intervals → windows: a device's energy between two boundary readings,
numbered and stamped in Unix time for the wire (monotonic inside).

Because the sampler reads each counter exactly once per boundary, a window's
µJ *is* the counter delta between its boundaries, and consecutive windows
share their boundary reading: the windows of a run sum exactly to the counter
delta over the span they cover. Across a restart the first window starts at
the reading persisted before it (agent.counters.Counter.resume), so that holds
across restarts too, or the downtime is a gap with its reason.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from agent.counters import Interval
from protos.energy import GapReason, Grade, Share, mean_uw
from protos.pool.v1 import agent_pb2, types_pb2


@dataclass(frozen=True, slots=True)
class Window:
    device_id: str
    seq: int
    start_ns: int           # Unix ns
    end_ns: int             # Unix ns
    uj: int | None
    grade: Grade
    mean_uw: int | None
    gap: str | None = None  # why uj is None, for operators (logged, not sent)
    shares: tuple[Share, ...] = field(default=())
    occupancy_version: int = 0
    reason: GapReason | None = None  # why uj is None, on the wire
    lost_windows: int = 0            # measured windows merged into this gap (spool overflow)

    def as_proto(self) -> agent_pb2.Window:
        msg = agent_pb2.Window(device_id=self.device_id, seq=self.seq, start_ns=self.start_ns,
                               end_ns=self.end_ns, grade=int(self.grade),
                               occupancy_version=self.occupancy_version,
                               gap_reason=self.reason or 0, lost_windows=self.lost_windows)
        if self.uj is not None:
            msg.uj = self.uj
            msg.mean_uw = self.mean_uw
            msg.shares.extend(types_pb2.Share(occupant=s.occupant, uj=s.uj, grade=int(s.grade))
                              for s in self.shares)
        return msg


def window_json(w: agent_pb2.Window) -> dict:
    """What `pool-agent --stdout` prints for a window, from its wire form."""
    figure = w.HasField("uj")
    doc = {"device": w.device_id, "seq": w.seq, "start_ns": w.start_ns, "end_ns": w.end_ns,
           "uj": w.uj if figure else None, "grade": Grade(w.grade).name,
           "mean_uw": w.mean_uw if figure else None}
    if w.gap_reason:
        doc["gap"] = GapReason(w.gap_reason).name
    if w.lost_windows:
        doc["lost_windows"] = w.lost_windows
    return doc


def window_of(device_id: str, seq: int, interval: Interval) -> Window:
    """The window of an interval: Unix edges, mean power over its monotonic duration."""
    start, end = interval.unix
    return Window(device_id, seq, start, end, interval.uj, interval.grade,
                  mean_uw(interval.uj, interval.end_ns - interval.start_ns), interval.gap, reason=interval.reason)


class Sequencer:
    """Window numbers within one run, strictly increasing across devices.
    Durable numbering is the spool's: it renumbers each window it stores from
    the highest seq it ever handed out (agent.spool), so numbers never repeat
    across restarts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 1

    def next(self) -> int:
        with self._lock:
            seq, self._next = self._next, self._next + 1
            return seq
