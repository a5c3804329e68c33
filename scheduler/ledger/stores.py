"""Which store a location names, for tools that take either: a libpq
connection string (`postgresql://…`, or `key=value …`) is the PostgreSQL
store in that database; anything else is a SQLite file's path."""

from __future__ import annotations

from pathlib import Path

from scheduler.ledger.store import Store


def is_dsn(location: str) -> bool:
    head = location.split("/")[0]
    return location.startswith(("postgresql://", "postgres://")) or ("=" in head and not Path(location).exists())


def open_store(location: str, *, create: bool = False) -> Store:
    """StoreError if it cannot be opened (or, without create, holds no ledger)."""
    if is_dsn(location):
        from scheduler.ledger.postgres import PostgresStore   # psycopg only when asked for
        return PostgresStore(location, create=create)
    from scheduler.ledger.sqlite import SqliteStore
    return SqliteStore(location, create=create)


def describe(location: str) -> str:
    """A location fit for a message: a DSN without anything after a password key."""
    if not is_dsn(location):
        return location
    return " ".join(p for p in location.split() if not p.lower().startswith("password=")) or "PostgreSQL"
