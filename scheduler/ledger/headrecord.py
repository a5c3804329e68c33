"""The head record: how long the store was, and its head, after the last group
commit — kept outside the SQLite file, so that a store which loses durable
receipts (a WAL cut, damaged or deleted after a crash) is caught at start-up
instead of served.

The file (`<store>.head`) is two 64-byte slots, each
  b"POOLHEAD" | length (u64, big-endian) | head (SHA-256, 32 bytes) | check (16 bytes)
where check is the first 16 bytes of SHA-256 of the 48 bytes before it. A write
goes to the slot that does not hold the current record, then fdatasync: a torn
write spoils at most that slot, and the other still holds the previous record.
The record is the valid slot with the greater length. Creating the file also
syncs its directory. Only the store's writer writes it, after its commit.
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path
from typing import NamedTuple

MAGIC = b"POOLHEAD"
SLOT = 64
_LAYOUT = struct.Struct(">8sQ32s")   # magic, length, head: 48 bytes, then the check


class Head(NamedTuple):
    length: int
    head: bytes


def _check(fields: bytes) -> bytes:
    return hashlib.sha256(fields).digest()[:16]


def _slot(data: bytes) -> Head | None:
    if len(data) != SLOT or data[48:] != _check(data[:48]):
        return None
    magic, length, head = _LAYOUT.unpack(data[:48])
    return Head(length, head) if magic == MAGIC else None


def path_for(store_path: Path) -> Path:
    return store_path.with_name(store_path.name + ".head")


class HeadRecord:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._current_slot = 1          # the next write goes to the other one
        self.unreadable = False         # read found the file but no valid slot in it

    def read(self) -> Head | None:
        """The record, or None when there is none (no file, or no valid slot:
        then `unreadable`, and what was durable is not known)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        slots = [_slot(data[i * SLOT:(i + 1) * SLOT]) for i in range(2)]
        self.unreadable = slots == [None, None]
        best = max(range(2), key=lambda i: -1 if slots[i] is None else slots[i].length)
        self._current_slot = best
        return slots[best]

    def write(self, head: Head) -> None:
        """Durable when this returns (OSError otherwise)."""
        fields = _LAYOUT.pack(MAGIC, head.length, head.head)
        if self._fd is None:
            self._open()
        slot = 1 - self._current_slot
        os.pwrite(self._fd, fields + _check(fields), slot * SLOT)
        os.fdatasync(self._fd)
        self._current_slot = slot

    def _open(self) -> None:
        created = not self.path.exists()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        if created:   # both slots exist from the start, so the file never grows again
            os.pwrite(self._fd, bytes(2 * SLOT), 0)
            os.fsync(self._fd)
            directory = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
