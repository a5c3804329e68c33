"""Exports: the ledger as an RFC 8742 CBOR sequence — receipts back to back,
nothing before, between or after them — and reading a location that is an
export, a SQLite store or a PostgreSQL store."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from scheduler.ledger import cose
from scheduler.ledger.dcbor import DcborError
from scheduler.ledger.receipts import ZERO_HASH, digest
from scheduler.ledger.sqlite import MAGIC, SqliteStore
from scheduler.ledger.stores import is_dsn, open_store


def split(blob: bytes | mmap.mmap) -> Iterator[bytes]:
    """The receipts of a sequence; from the first unreadable one on, the rest of
    the blob as one item (so a verifier reports it at the right index)."""
    pos = 0
    while pos < len(blob):
        try:
            _, end = cose.parse(blob, pos)
        except DcborError:
            yield blob[pos:]
            return
        yield blob[pos:end]
        pos = end


def write(receipts: Iterable[bytes], path: str | Path) -> tuple[int, bytes]:
    """Write atomically (temp file, fsync, rename); (receipts written, head)."""
    path = Path(path)
    temp = path.with_name(f".{path.name}.partial")
    count, head = 0, ZERO_HASH
    with open(temp, "wb") as out:
        for raw in receipts:
            out.write(raw)
            count, head = count + 1, digest(raw)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, path)
    return count, head


def receipts_at(path: str | Path) -> Iterator[bytes]:
    """The receipts of a store (a PostgreSQL DSN, or a SQLite file, told apart
    from an export file by its magic) or of an export file."""
    if isinstance(path, str) and is_dsn(path):
        store = open_store(path)
        try:
            yield from store.read()
        finally:
            store.close()
        return
    with open(path, "rb") as file:
        if file.read(len(MAGIC)) == MAGIC:
            store = SqliteStore(path)
            try:
                yield from store.read()
            finally:
                store.close()
            return
        if os.fstat(file.fileno()).st_size == 0:
            return
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as blob:
            yield from split(blob)
