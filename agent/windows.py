"""Intervals → windows: a device's energy between two boundary readings,
numbered and stamped in Unix time for the wire (monotonic inside).

Because the sampler reads each counter exactly once per boundary, a window's
µJ *is* the counter delta between its boundaries, and consecutive windows
share their boundary reading: the windows of a run sum exactly to the counter
delta over the span they cover.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from agent.counters import Interval
from protos.energy import Grade, Share, mean_uw
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
    gap: str | None = None  # why uj is None; logged and counted, not sent
    shares: tuple[Share, ...] = field(default=())
    occupancy_version: int = 0

    def as_json(self) -> dict:
        return {"device": self.device_id, "seq": self.seq, "start_ns": self.start_ns,
                "end_ns": self.end_ns, "uj": self.uj, "grade": self.grade.name,
                "mean_uw": self.mean_uw}

    def as_proto(self) -> agent_pb2.Window:
        msg = agent_pb2.Window(device_id=self.device_id, seq=self.seq, start_ns=self.start_ns,
                               end_ns=self.end_ns, grade=int(self.grade),
                               occupancy_version=self.occupancy_version)
        if self.uj is not None:
            msg.uj = self.uj
            msg.mean_uw = self.mean_uw
            msg.shares.extend(types_pb2.Share(occupant=s.occupant, uj=s.uj, grade=int(s.grade))
                              for s in self.shares)
        return msg


def window_of(device_id: str, seq: int, interval: Interval, unix_offset_ns: int) -> Window:
    return Window(device_id, seq, interval.start_ns + unix_offset_ns, interval.end_ns + unix_offset_ns,
                  interval.uj, interval.grade, mean_uw(interval.uj, interval.end_ns - interval.start_ns),
                  interval.gap)


class Sequencer:
    """Window sequence numbers: per agent, strictly increasing across all its
    devices and across restarts. With a state file, numbers are reserved in
    blocks (one fsync per `block`), so a restart resumes above anything it
    may have sent; numbers may skip, never repeat."""

    def __init__(self, state_file: Path | None = None, block: int = 100_000):
        self._lock = threading.Lock()
        self._file, self._block = state_file, block
        self._next = self._load() + 1
        self._reserved = self._next - 1

    def _load(self) -> int:
        if self._file is None or not self._file.exists():
            return 0
        text = self._file.read_text().strip()
        if not text.isdigit():
            raise ValueError(f"{self._file}: expected a sequence number, found {text[:40]!r}")
        return int(text)

    def _reserve(self, upto: int) -> None:
        if self._file is not None:
            tmp = self._file.with_suffix(".tmp")
            with open(tmp, "w") as f:
                f.write(f"{upto}\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._file)
        self._reserved = upto

    def at_least(self, seq: int) -> None:
        """Never hand out `seq` or below (the scheduler has counted up to it)."""
        with self._lock:
            self._next = max(self._next, seq + 1)

    def next(self) -> int:
        with self._lock:
            if self._next > self._reserved:
                self._reserve(self._next + self._block - 1)
            seq, self._next = self._next, self._next + 1
            return seq
