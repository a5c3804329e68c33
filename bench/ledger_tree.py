"""The Merkle tree's figures (issue 24), in one run; part of bench/ledger.py
(`--tree`), in a module of its own so that run stays short:

  durable appends/s with the tree and claim index kept, against the same
      store with both switched off, interleaved in the same run
      (target: >= 95 %),
  an inclusion proof at 10,000,000 receipts, server time (target: <= 1 ms),
  check-proof of a three-receipt claim proof at that size (target: <= 50 ms),
  a signed checkpoint plus the consistency proof from the previous one at
      10,000,000 receipts (target: <= 5 ms).

The 10M-receipt ledger is synthetic: receipt i is its index as 8 bytes (so
leaf i is SHA-256(0x00 ‖ i)), in the store's `receipts` table, with the
nodes the store keeps (levels 4 and up) in its `merkle` table, read by the
store's own `tree_node` (levels below 4 from the 16 receipts of their block,
as the store does; real receipts are ~300 bytes to a few KiB, so that read is
a little dearer than here). It is built once and kept in $POOL_BENCH_TREE
(default /tmp/pool-bench-tree-10M.db); building it takes minutes on the 2-core
box, and is not timed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from scheduler.ledger import keys, merkle, note, proof, receipts
from scheduler.ledger.index import STORED_FROM, LowLevels
from scheduler.ledger.sqlite import _INDEX, SqliteStore
from scheduler.ledger.steward import Steward
from scheduler.ledger.writer import GroupCommitWriter

BODY = {"claim_id": "c-000123", "hold_uj": 3_600_000_000_000, "hold_grade": "HwShunt", "worker": "gpu-17",
        "devices": [{"device_id": "GPU-0", "mdev": 1000}], "borrowed": False, "admitted_seq": 12, "at_ns": 1}
TEN_MILLION = 10_000_000


class NoTree:
    """What a store without the tree does at an append: nothing."""
    frontier = merkle.Frontier()

    def closing(self, first_seq, raws):
        return None, []

    def moved(self, after):
        pass


def append_rate(path: Path, key: keys.SigningKey, total: int, tree: bool) -> float:
    store = SqliteStore(path, create=True)
    if not tree:
        store.tree = NoTree()
        store._index = lambda nodes, claims: None
    steward = Steward.open(store, key)
    writer = GroupCommitWriter(steward)

    async def appender(count: int) -> None:
        for _ in range(count):
            await writer.append("claim_admitted", BODY)

    async def main() -> None:
        await asyncio.gather(*(appender(total // 50) for _ in range(50)))
        await writer.close()

    start = time.perf_counter()
    asyncio.run(main())
    seconds = time.perf_counter() - start
    steward.close()
    return total / seconds


def synthetic_leaf(i: int) -> bytes:
    return hashlib.sha256(b"\x00" + i.to_bytes(8, "big")).digest()


def build_tree(path: Path, n: int) -> None:
    """n synthetic receipts (8 bytes each: the index) and the store's nodes
    over them (levels STORED_FROM and up), in the store's own tables."""
    tmp = path.with_suffix(".building")
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp)
    conn.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;"
                       "CREATE TABLE receipts (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, raw BLOB NOT NULL);")
    for statement in _INDEX:
        conn.execute(statement)
    conn.executemany("INSERT INTO receipts VALUES (?, 'synthetic', ?)", ((i, i.to_bytes(8, "big")) for i in range(n)))
    level, nodes = 0, [synthetic_leaf(i) for i in range(n)]
    while nodes:
        if level >= STORED_FROM:
            conn.executemany("INSERT INTO merkle VALUES (?, ?, ?)", ((level, i, h) for i, h in enumerate(nodes)))
        nodes = [merkle.node_hash(nodes[i], nodes[i + 1]) for i in range(0, len(nodes) - 1, 2)]
        level += 1
    conn.commit()
    conn.close()
    tmp.rename(path)


def reader(path: Path) -> SqliteStore:
    """The store's own read side (tree_node, its low levels from the receipts) over the synthetic tables."""
    store = SqliteStore.__new__(SqliteStore)
    store.path, store._read_lock, store._reader = path, threading.Lock(), None
    store._low = LowLevels(lambda start, stop: [raw for (raw,) in store._reading(
        "SELECT raw FROM receipts WHERE seq >= ? AND seq < ? ORDER BY seq", (start, stop))])
    return store


def best_ms(fn, repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), max(times)


def line(label: str, value: str, target: str = "", ratio: float | None = None) -> None:
    ratio_text = "" if ratio is None else f"{ratio:7.1%}"
    print(f"{label:<56} {value:>14}  {target:<22} {ratio_text}")


def main(appends: int = 20_000) -> None:
    key, witness = keys.generate(), keys.generate()
    if os.environ.get("POOL_BENCH_TREE_SKIP_APPENDS"):
        appends = 0
    with tempfile.TemporaryDirectory() as tmp:
        rates = {True: [], False: []}
        for round_ in range(3 if appends else 0):   # interleaved, so load on the shared box falls on both alike
            for tree in (False, True):
                rates[tree].append(append_rate(Path(tmp) / f"{tree}-{round_}.db", key, appends, tree))
    if appends:
        report_appends(rates)
    proof_figures(key, witness)


def report_appends(rates: dict) -> None:
    with_tree, without = statistics.median(rates[True]), statistics.median(rates[False])
    line("appends/s, tree and claim index kept (median of 3)", f"{with_tree:,.0f}/s")
    line("appends/s, neither (same run, median of 3)", f"{without:,.0f}/s")
    line("  with / without", f"{with_tree / without:.3f}", ">= 0.95", with_tree / without)


def proof_figures(key: keys.SigningKey, witness: keys.SigningKey) -> None:
    path = Path(os.environ.get("POOL_BENCH_TREE", "/tmp/pool-bench-tree-10M.db"))
    if not path.exists():
        print(f"building the synthetic {TEN_MILLION:,}-leaf tree in {path} (once; not timed) …", flush=True)
        build_tree(path, TEN_MILLION)
    store = reader(path)
    proofs, n = merkle.Proofs(store.tree_node, store.tree_nodes), TEN_MILLION
    root = proofs.root(0, n)
    leaves = [9_999_999, 7_654_321, 1_234_567, 5_000_000, 3]
    turn = iter(leaves * 100)   # one proof a time, the low block read cold each time
    median, worst = best_ms(lambda: (store._low._blocks.clear(), proofs.inclusion(next(turn), n)), 500)
    line("inclusion proof at 10,000,000 (median / max of 500)", f"{median:.3f} / {worst:.3f} ms",
         "<= 1 ms", 1 / median)
    assert all(merkle.verify_inclusion(i, n, synthetic_leaf(i), proofs.inclusion(i, n), root) for i in leaves)

    previous = n - 12_345
    origin = note.origin_for(bytes(32))

    def checkpoint_and_consistency() -> tuple:
        body = note.Checkpoint(origin, n, proofs.root(0, n)).body()
        return note.sign(body, origin, key), proofs.consistency(previous, n)
    median, worst = best_ms(checkpoint_and_consistency, 200)
    line("signed checkpoint + consistency from n-12,345 (median / max of 200)", f"{median:.3f} / {worst:.3f} ms",
         "<= 5 ms", 5 / median)

    # a claim proof: three real receipts placed as leaves of a tree like the big one
    raws = [receipts.make(key, seq, bytes(32), 1, kind, {"claim_id": "c-1"}).raw
            for seq, kind in ((3, "claim_submitted"), (4, "claim_admitted"), (9_999_990, "released"))]
    leaves_at = {3: raws[0], 4: raws[1], 9_999_990: raws[2]}
    paths, root_with = with_receipts(proofs, n, leaves_at)
    signed = note.sign(note.Checkpoint(origin, n, root_with).body(), origin, key)
    cosigned = signed.with_signature(note.cosign(signed.body, "w", witness, 1))
    doc = proof.document("c-1", cosigned.encoded(), [(i, leaves_at[i], paths[i]) for i in sorted(leaves_at)],
                         [], 0, [])
    vkey = note.VKey("w", note.COSIGNATURE_V1, witness.public)
    median, worst = best_ms(lambda: proof.check(doc, key.public, [vkey]), 200)
    line("check-proof, 3 receipts at 10,000,000 (median / max of 200)", f"{median:.3f} / {worst:.3f} ms",
         "<= 50 ms", 50 / median)
    start = time.perf_counter()
    done = subprocess.run([str(Path(sys.executable).with_name("poolctl")), "ledger", "check-proof", str(write(doc)),
                           "--key", write_key(key), "--witness-key", vkey.text()], capture_output=True)
    assert done.returncode == 0, done.stderr
    line("  the whole poolctl check-proof process (start-up included)",
         f"{(time.perf_counter() - start) * 1000:.0f} ms")


def write(doc: dict) -> Path:
    path = Path(tempfile.mkdtemp()) / "proof.json"
    path.write_text(json.dumps(doc))
    return path


def write_key(key: keys.SigningKey) -> str:
    path = Path(tempfile.mkdtemp()) / "steward.pub"
    path.write_text(key.public.raw.hex())
    return str(path)


def with_receipts(proofs: merkle.Proofs, n: int, placed: dict[int, bytes]) -> tuple[dict, bytes]:
    """Inclusion paths and root for the synthetic tree with some leaves replaced
    by receipts: every node on their paths to the root is recomputed, the rest read."""
    changed: dict[tuple[int, int], bytes] = {(0, i): merkle.leaf_hash(raw) for i, raw in placed.items()}
    level = 0
    while True:
        parents = {(level + 1, i >> 1) for (lv, i) in changed if lv == level}
        if not parents or all(((idx + 1) << (level + 1)) > n for _, idx in parents):
            break
        for _, idx in parents:
            if ((idx + 1) << (level + 1)) <= n:
                left = changed.get((level, 2 * idx)) or proofs.node(level, 2 * idx)
                right = changed.get((level, 2 * idx + 1)) or proofs.node(level, 2 * idx + 1)
                changed[level + 1, idx] = merkle.node_hash(left, right)
        level += 1
    patched = merkle.Proofs(lambda lv, i: changed.get((lv, i)) or proofs.node(lv, i))
    return {i: patched.inclusion(i, n) for i in placed}, patched.root(0, n)


if __name__ == "__main__":
    main()
