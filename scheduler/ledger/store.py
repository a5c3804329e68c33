"""What the ledger needs from storage, kept small so that another backend
(PostgreSQL) can provide it: append a batch durably, read a range, count.

Storage failures are mapped to types once, here, so that every caller names
them alike (`code` is the name a log line or an exit message starts with):
a store that is corrupt, read-only or full, or one that has lost receipts it
acknowledged before."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple, Protocol


class StoreError(Exception):
    """Storage that cannot be opened or written; the message says which and why."""
    code = "LEDGER_IO_ERROR"
    needs_operator = False   # True: waiting or restarting cannot help, a person must act


class StoreCorrupt(StoreError):
    """The file is not a readable Pool ledger (bad pages, not SQLite, another schema)."""
    code = "LEDGER_CORRUPT"
    needs_operator = True


class StoreReadOnly(StoreError):
    """The store, its directory or its filesystem cannot be written."""
    code = "LEDGER_READ_ONLY"
    needs_operator = True


class StoreFull(StoreError):
    """The filesystem has no room for the next write; it may come back by itself."""
    code = "LEDGER_DISK_FULL"


class Loss(NamedTuple):
    """Receipts a store acknowledged once and no longer holds: it is shorter
    than its head record, or its receipt at the recorded length is another."""
    recorded_length: int
    recorded_head: bytes
    length: int          # receipts the store holds now
    unreadable: bool = False   # the head record has no readable slot: what was durable is not known

    @property
    def shorter(self) -> bool:
        return self.length < self.recorded_length


class HistoryLost(StoreError):
    """Start-up found a Loss and nobody accepted it."""
    code = "LEDGER_HISTORY_LOST"
    needs_operator = True

    def __init__(self, where: str, loss: Loss) -> None:
        if loss.unreadable:
            what = (f"has a head record with no readable slot: how many receipts were durable is not known; "
                    f"it holds {loss.length}")
        elif loss.shorter:
            what = (f"lost {loss.recorded_length - loss.length} acknowledged receipts (seq {loss.length} to "
                    f"{loss.recorded_length - 1}): it holds {loss.length}, its head record says "
                    f"{loss.recorded_length} were durable")
        else:
            what = (f"diverges from its head record: receipt {loss.recorded_length - 1} is not the one "
                    f"recorded as durable (head {loss.recorded_head.hex()[:16]}…)")
        super().__init__(f"{where} {what}; restore it from an export (`poolctl ledger import`) or accept "
                         "the loss with `pool-scheduler --accept-ledger-loss`, which records it in the ledger")
        self.loss = loss


class Store(Protocol):
    """Two members are optional, for a store that can lose acknowledged history
    by itself (SQLite: a WAL lost or damaged in a crash):
      loss: Loss | None    what it lost since its head record; None if nothing
      accept_loss()        take the store as it is from now on (records it)
      probe()              a write that changes no receipt: StoreError if the next append could not be stored
    A store whose backend guarantees durability itself (PostgreSQL's own
    commit and replication) leaves them out; `recorded_loss` and `probe` then
    answer for it."""

    def length(self) -> int:
        """The number of receipts stored."""

    def read(self, start: int = 0, stop: int | None = None) -> Iterator[bytes]:
        """Receipts start..stop-1 (to the end if stop is None), in order."""

    def append(self, first_seq: int, receipts: Sequence[tuple[str, bytes]],
               claims: Sequence[tuple[str, int]] | None = None) -> None:
        """Store (kind, receipt bytes) pairs as first_seq, first_seq+1, … in one
        transaction: all or none, durable when this returns. StoreError unless
        first_seq equals length() — a second writer can never fork the chain.
        In the same transaction: the Merkle nodes the receipts close (levels 4
        and up), and the (claim, seq) index rows (`claims`; None: read from the
        receipts), index.py."""

    def tree_node(self, level: int, index: int) -> bytes:
        """The hash of the complete subtree (level, index) of the Merkle tree."""

    def claim_seqs(self, claim: str) -> list[int]:
        """Seqs of the receipts whose body names `claim`, in order."""

    def latest(self, kind: str) -> int | None:
        """The seq of the last receipt of `kind` (used for checkpoints), or None.
        The kind is an index hint: the receipt read back is verified anyway."""

    def close(self) -> None:
        ...


def recorded_loss(store: Store) -> Loss | None:
    return getattr(store, "loss", None)


def probe(store: Store) -> None:
    """StoreError (typed) if the store could not take a write now."""
    test_write = getattr(store, "probe", None)
    if test_write is not None:
        test_write()
