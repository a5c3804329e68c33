"""What the head record costs (issue 12): durable appends/s through the group
commit with the record written after every commit, beside the same store with
the record write left out, alternating in one run (the host is noisy), for
few appenders (one commit per append: the worst case) and many (large
batches). Also the start-up test write (probe), once.

Usage: .venv/bin/python bench/headrecord.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from ledger import commit_rate as rate   # bench/ledger.py, beside this file
from scheduler.ledger import keys
from scheduler.ledger.sqlite import SqliteStore


class Unrecorded(SqliteStore):
    """The peer: the same store without the head record's write."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, create=True)
        self.record.write = lambda head: None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    key = keys.generate()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        base = Path(tmp)
        for appenders, total in ((1, 400), (256, 20_000)):
            with_record, without = [], []
            for i in range(args.rounds):
                with_record.append(rate(SqliteStore(base / f"r{appenders}-{i}.db", create=True), key, total, appenders))
                without.append(rate(Unrecorded(base / f"u{appenders}-{i}.db"), key, total, appenders))
            a, b = statistics.median(with_record), statistics.median(without)
            print(f"durable appends/s, {appenders:>3} appender(s): with the head record {a:>9,.0f}/s, "
                  f"without {b:>9,.0f}/s   ratio {a / b:6.1%}   (median of {args.rounds})")
        store = SqliteStore(base / "r1-0.db")
        start = time.perf_counter()
        store.probe()
        print(f"start-up test write (probe, 16 MiB headroom): {1e3 * (time.perf_counter() - start):.1f} ms")
        store.close()


if __name__ == "__main__":
    main()
