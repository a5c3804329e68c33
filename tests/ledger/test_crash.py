"""SIGKILL in the middle of appends: every acknowledged receipt survives and the
store reopens verified."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from scheduler.ledger import keys
from scheduler.ledger.fold import Fold
from scheduler.ledger.steward import open_ledger

CHILD = textwrap.dedent("""
    import asyncio, sys
    from scheduler.ledger import keys
    from scheduler.ledger.steward import open_ledger
    from scheduler.ledger.writer import GroupCommitWriter

    writer = GroupCommitWriter(open_ledger(sys.argv[1], keys.load_signing_key(sys.argv[2])))

    async def appender(task):
        n = 0
        while True:
            receipt = await writer.append("metered", {"task": task, "n": n})
            print(receipt.entry.seq, task, n, flush=True)   # acknowledged: durable
            n += 1

    async def main():
        await asyncio.gather(*(appender(t) for t in range(8)))

    asyncio.run(main())
""")


@pytest.mark.slow
def test_acknowledged_appends_survive_sigkill(tmp_path):
    key_path, _ = keys.write_pair(keys.generate(), tmp_path / "steward")
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "l.db"), str(key_path)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acknowledged = []
    deadline = time.monotonic() + 30
    while len(acknowledged) < 2000 and time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
        acknowledged.append(tuple(map(int, line.split())))
    os.kill(child.pid, signal.SIGKILL)
    rest, errors = child.communicate(timeout=30)
    acknowledged += [tuple(map(int, line.split())) for line in rest.splitlines() if line.strip()]
    assert child.returncode == -signal.SIGKILL
    assert len(acknowledged) >= 100, errors

    def collect(stored, entry):      # a fold that keeps (task, n) by seq
        stored[entry.seq] = (entry.body["task"], entry.body["n"])
        return stored
    steward = open_ledger(tmp_path / "l.db", keys.load_signing_key(key_path), Fold(collect, {}))
    assert all(steward.state[seq] == (task, n) for seq, task, n in acknowledged)
    assert steward.length > max(seq for seq, _, _ in acknowledged)
    steward.close()
