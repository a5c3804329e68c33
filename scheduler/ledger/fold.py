"""Replay: one fold from receipts to state, used live and at start-up.

The caller's `apply(state, entry) -> state` must be pure: replaying a ledger
then gives exactly the state the live process had after the same appends. The
ledger's own kinds (genesis, witness, checkpoint) are never passed to `apply`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from scheduler.ledger.dcbor import normalize
from scheduler.ledger.keys import PublicKey
from scheduler.ledger.receipts import CHECKPOINT, LEDGER_KINDS, Entry
from scheduler.ledger.store import Store
from scheduler.ledger.verify import LedgerInvalid, verify


@dataclass(frozen=True)
class Fold:
    apply: Callable[[Any, Entry], Any]
    initial: Any
    restore: Callable[[Any], Any] | None = None   # a checkpoint's "state" -> state
    snapshot: Callable[[Any], Any] | None = None  # state -> a det-CBOR value


class CheckpointMismatch(Exception):
    """A checkpoint whose snapshot differs from the state replayed up to it."""


class Folder:
    """The on_entry callback of a verification: folds caller kinds; at a
    checkpoint it either starts from it (resuming) or audits it (snapshot given)."""

    def __init__(self, fold: Fold) -> None:
        self.fold = fold
        self.state = fold.initial
        self.resuming = False     # set when start-up resumes from a checkpoint

    def __call__(self, entry: Entry) -> None:
        if entry.kind == CHECKPOINT:
            self._checkpoint(entry)
        elif entry.kind not in LEDGER_KINDS:
            self.state = self.fold.apply(self.state, entry)

    def _checkpoint(self, entry: Entry) -> None:
        if self.resuming:
            self.state = self.fold.restore(entry.body["state"])
            self.resuming = False
        elif self.fold.snapshot is not None and \
                normalize(self.fold.snapshot(self.state)) != entry.body["state"]:
            raise CheckpointMismatch(f"checkpoint {entry.seq} differs from the replayed state")


def replay(source: Store | Iterable[bytes], apply: Callable[[Any, Entry], Any], initial: Any, *,
           key: PublicKey | None = None, snapshot: Callable[[Any], Any] | None = None,
           workers: int | None = None) -> Any:
    """Verify every receipt, folding as it goes; the state, or LedgerInvalid.
    With `snapshot`, every checkpoint on the way is audited against the fold."""
    folder = Folder(Fold(apply, initial, snapshot=snapshot))
    receipts = source.read() if hasattr(source, "read") else source
    report = verify(receipts, key, on_entry=folder, workers=workers)
    if not report.valid:
        raise LedgerInvalid(report)
    return folder.state
