"""What the ledger needs from storage, kept small so that another backend
(PostgreSQL) can provide it: append a batch durably, read a range, count."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol


class StoreError(Exception):
    """Storage that cannot be opened or written; the message says which and why."""


class Store(Protocol):
    def length(self) -> int:
        """The number of receipts stored."""

    def read(self, start: int = 0, stop: int | None = None) -> Iterator[bytes]:
        """Receipts start..stop-1 (to the end if stop is None), in order."""

    def append(self, first_seq: int, receipts: Sequence[tuple[str, bytes]]) -> None:
        """Store (kind, receipt bytes) pairs as first_seq, first_seq+1, … in one
        transaction: all or none, durable when this returns. StoreError unless
        first_seq equals length() — a second writer can never fork the chain."""

    def latest(self, kind: str) -> int | None:
        """The seq of the last receipt of `kind` (used for checkpoints), or None.
        The kind is an index hint: the receipt read back is verified anyway."""

    def close(self) -> None:
        ...
