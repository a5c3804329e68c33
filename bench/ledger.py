"""Ledger speed on this machine, in one run (issue 4):

  raw Ed25519 sign and verify rates (one core, cryptography),
  durable appends/s through the group commit with concurrent asyncio appenders
      (target: >= 50 % of the raw sign rate),
  with --postgres DSN (or $POOL_BENCH_POSTGRES_DSN), the same on the PostgreSQL
      store, in a fresh schema (target: >= 50 % of the SQLite rate; issue 15),
  verification/s of an export, signatures in worker processes
      (target: >= 80 % of the raw verify rate),
  start-up replay (verify + fold) at 100,000 and 1,000,000 receipts
      (measured with --full; otherwise 1,000,000 is extrapolated from the
      measured 100,000 and 200,000), and start-up from a checkpoint.

With --tree, only the Merkle tree's figures instead (issue 24; bench/ledger_tree.py).

Usage: .venv/bin/python bench/ledger.py [--quick | --full] [--postgres DSN] | --tree
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from scheduler.ledger import export, keys
from scheduler.ledger.fold import Fold, replay
from scheduler.ledger.postgres import PostgresStore
from scheduler.ledger.sqlite import SqliteStore
from scheduler.ledger.steward import Steward, prepare
from scheduler.ledger.verify import verify
from scheduler.ledger.writer import GroupCommitWriter

BODY = {"claim": "c-000123", "tenant": "research/vision", "hold_uj": 3_600_000_000_000,
        "grade": "HwShunt", "units": 12}


def count_kinds(state: dict, entry) -> dict:
    """A light stand-in for the kernel's fold (mutating for speed; bench only)."""
    state[entry.kind] = state.get(entry.kind, 0) + entry.body["units"]
    return state


def timed(fn, *args):
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result


def raw_rates(n: int) -> tuple[float, float]:
    key = keys.generate()
    message = b"\x84\x6aSignature1" + bytes(200)
    sign_s, signatures = timed(lambda: [key.sign(message) for _ in range(n)])
    verify_s, _ = timed(lambda: [key.public.verifies(s, message) for s in signatures])
    return n / sign_s, n / verify_s


def fresh_schema(dsn: str) -> str:
    """A DSN whose sessions land in a new, empty schema of that database."""
    import uuid

    import psycopg
    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    return f"{dsn} options=-csearch_path={name}"


def group_commit_rate(path: Path | str, key: keys.SigningKey, total: int, appenders: int) -> float:
    """On a new SQLite file at `path`, or in a new schema of the PostgreSQL DSN `path`."""
    store = SqliteStore(path, create=True) if isinstance(path, Path) else PostgresStore(fresh_schema(path), create=True)
    return commit_rate(store, key, total, appenders)


def commit_rate(store: SqliteStore, key: keys.SigningKey, total: int, appenders: int) -> float:
    """Durable appends/s into `store` (closed after) from `appenders` concurrent appenders."""
    steward = Steward.open(store, key)
    writer = GroupCommitWriter(steward)

    async def appender(count: int) -> None:
        for _ in range(count):
            await writer.append("claim.metered", BODY)

    async def main() -> None:
        await asyncio.gather(*(appender(total // appenders) for _ in range(appenders)))
        await writer.close()

    seconds, _ = timed(asyncio.run, main())
    steward.close()
    return total / seconds


def build(path: Path, key: keys.SigningKey, n: int, checkpoint_tail: int) -> None:
    """n receipts (genesis included), with a checkpoint `checkpoint_tail` from the end."""
    steward = Steward.open(SqliteStore(path, create=True), key)
    state: dict = {}
    batch = [prepare("claim.metered", BODY)] * 5000
    while steward.length < n - checkpoint_tail:
        made = steward.commit(batch[:n - checkpoint_tail - steward.length])
        for receipt in made:
            count_kinds(state, receipt.entry)
    steward.checkpoint(dict(state))
    while steward.length < n:
        steward.commit(batch[:n - steward.length])
    steward.close()


def replay_seconds(store: SqliteStore, n: int, key: keys.PublicKey) -> float:
    seconds, _ = timed(lambda: replay(store.read(0, n), count_kinds, {}, key=key))
    return seconds


def line(label: str, value: str, target: str = "", ratio: float | None = None) -> None:
    """Rates: ratio = measured / peer (higher is better); times: measured / budget."""
    ratio_text = "" if ratio is None else f"{ratio:7.1%}"
    print(f"{label:<46} {value:>16}  {target:<34} {ratio_text}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    size.add_argument("--full", action="store_true", help="measure 1,000,000 receipts directly")
    parser.add_argument("--postgres", metavar="DSN", default=os.environ.get("POOL_BENCH_POSTGRES_DSN"),
                        help="also measure the PostgreSQL store (a database the bench may create schemas in)")
    parser.add_argument("--tree", action="store_true",
                        help="only the Merkle tree's figures (bench/ledger_tree.py): appends with and without "
                             "it, proofs and checkpoints at 10,000,000 receipts, check-proof")
    args = parser.parse_args()
    if args.tree:
        import ledger_tree   # beside this file
        ledger_tree.main()
        return
    small, large = (10_000, 20_000) if args.quick else (100_000, 200_000)
    if args.full:
        large = 1_000_000
    key = keys.generate()
    print(f"cores: {os.cpu_count()}   sizes: {small:,} / {large:,}")

    sign_rate, verify_rate = raw_rates(2_000 if args.quick else 20_000)
    line("raw Ed25519 sign (1 core)", f"{sign_rate:,.0f}/s")
    line("raw Ed25519 verify (1 core)", f"{verify_rate:,.0f}/s")

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        tmp_path = Path(tmp)
        rate = group_commit_rate(tmp_path / "appends.db", key, 5_000 if args.quick else 50_000, 256)
        line("durable appends, group commit, 256 appenders", f"{rate:,.0f}/s",
             f">= 50% of sign {sign_rate:,.0f}/s", rate / sign_rate)
        if args.postgres:
            on_pg = group_commit_rate(args.postgres, key, 5_000 if args.quick else 50_000, 256)
            line("  the same on PostgreSQL", f"{on_pg:,.0f}/s", f">= 50% of SQLite {rate:,.0f}/s", on_pg / rate)

        db = tmp_path / "ledger.db"
        build_s, _ = timed(build, db, key, large, 1_000)
        print(f"(built {large:,} receipts in {build_s:.1f} s)")
        export.write(export.receipts_at(db), tmp_path / "ledger.cbor")
        seconds, report = timed(lambda: verify(export.receipts_at(tmp_path / "ledger.cbor"), key.public))
        assert report.valid, report
        line(f"verify export ({os.cpu_count()} workers + chain pass)", f"{large / seconds:,.0f}/s",
             f">= 80% of verify {verify_rate:,.0f}/s", large / seconds / verify_rate)

        store = SqliteStore(db)
        at_small = replay_seconds(store, small, key.public)
        at_large = replay_seconds(store, large, key.public)
        line(f"start-up replay, {small:,} receipts", f"{at_small:.2f} s")
        line(f"start-up replay, {large:,} receipts", f"{at_large:.2f} s", "budget 10 s", at_large / 10)
        if large != 1_000_000:
            per_receipt = (at_large - at_small) / (large - small)
            estimate = at_large + per_receipt * (1_000_000 - large)
            line("start-up replay, 1,000,000 (extrapolated)", f"{estimate:.1f} s",
                 "budget 10 s, else checkpoint", estimate / 10)
        fold = Fold(count_kinds, {}, restore=dict)
        seconds, steward = timed(lambda: Steward.open(store, key, fold))
        line(f"start-up from checkpoint, {large:,} (tail 1,000)", f"{seconds:.2f} s", "budget 10 s",
             seconds / 10)
        store.close()


if __name__ == "__main__":
    main()
