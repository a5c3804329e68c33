"""The claims path's cost in CPU instructions (issue 13), which do not depend
on what else the host is doing: the Claims servicer in this process, on a
real SQLite ledger (signed, group-committed, fsynced), without gRPC,

  SubmitMany x 100 (CPU-only claims, all admitted and kept open, as in
      bench/e2e.py's SubmitMany phase), 8 calls in flight: per admission,
  Submit + Release of a claim of an eighth of a GPU (bench/e2e.py's unary
      phase), 64 in flight: per call,

counted by valgrind's callgrind on the event loop's thread only (inside
functools.reduce, the marker the calls run under; the ledger's signing and
storing threads are not counted), beside the same counts for each git
revision given with --against (rates: bench/e2e.py, through gRPC).

    .venv/bin/python bench/claims_path.py [--against REF ...] [--batches N] [--cycles N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from functools import reduce
from pathlib import Path

from instructions import checkout, per_unit   # bench/instructions.py: a revision's tree; a callgrind count

ROOT = Path(__file__).resolve().parent.parent
TENANTS = [f"team{i}" for i in range(4)]
HUGE = 10**17
MANY, MANY_INFLIGHT, UNARY_INFLIGHT = 100, 8, 64


def servicer(directory: str):
    """A ClaimsServicer on a fresh ledger with bench/e2e.py's tree and four 8-GPU hosts."""
    from scheduler.kernel import ConfigApplied, Device, Tenant, Worker, WorkerRegistered
    from scheduler.ledger import keys
    from scheduler.ledger.sqlite import SqliteStore
    from scheduler.ledger.steward import Steward
    from scheduler.ledger.writer import GroupCommitWriter
    from scheduler.service.claims import ClaimsServicer
    from scheduler.service.config import Limits
    from scheduler.service.engine import Engine

    tree = (Tenant("root", guarantee_uj=HUGE * 4, guarantee_mdev=4 * 10**9),
            *(Tenant(t, "root", guarantee_uj=HUGE, guarantee_mdev=10**9) for t in TENANTS))
    workers = tuple(Worker(f"bench-{h}", cpu_millis=10**9, memory_mb=10**9, disk_mb=10**9,
                           devices=tuple(Device(f"GPU-{h}-{g}", "NVIDIA H200") for g in range(8))) for h in range(4))
    engine = Engine(1000, 10_000)
    steward = Steward.open(SqliteStore(Path(directory) / "ledger.sqlite", create=True), keys.generate(),
                           engine.ledger_fold())
    engine.start(GroupCommitWriter(steward))
    engine.ready = True
    claims = ClaimsServicer(engine, Limits(submits_per_s=0, max_open_claims_per_tenant=0))
    return engine, steward, claims, [ConfigApplied(tree), *(WorkerRegistered(w) for w in workers)]


async def phase(name: str, count: int, directory: str) -> tuple[int, float]:
    """`count` SubmitMany calls or Submit+Release cycles; (admissions, seconds)."""
    from protos.pool.v1 import claims_pb2, types_pb2
    engine, steward, claims, setup = servicer(directory)
    await engine.decide(setup, 0)
    admitted = 0
    turns = iter(range(count))

    async def many() -> None:
        nonlocal admitted
        for i in turns:
            answer = await claims.SubmitMany(claims_pb2.SubmitManyRequest(claims=[claims_pb2.SubmitRequest(
                claim_id=f"many-{i}-{j}", tenant=TENANTS[j % 4], resources=types_pb2.Resources(cpu_millis=1),
                estimate_uj=1) for j in range(MANY)]), None)
            admitted += sum(r.status.state == types_pb2.ADMITTED for r in answer.results)

    async def unary() -> None:
        nonlocal admitted
        for i in turns:
            status = await claims.Submit(claims_pb2.SubmitRequest(
                claim_id=f"c-{i}", tenant=TENANTS[i % 4], resources=types_pb2.Resources(gpu_mdev=125),
                estimate_uj=1), None)
            admitted += status.state == types_pb2.ADMITTED
            await claims.Release(claims_pb2.ReleaseRequest(claim_id=f"c-{i}"), None)

    start = time.perf_counter()
    clients = (many, MANY_INFLIGHT) if name == "many" else (unary, UNARY_INFLIGHT)
    await asyncio.gather(*(clients[0]() for _ in range(clients[1])))
    seconds = time.perf_counter() - start
    await engine.writer.close()
    steward.close()
    return admitted, seconds


def run_phase(name: str, count: int) -> tuple[int, float]:
    with tempfile.TemporaryDirectory(prefix="pool-claims-path-") as directory:
        return asyncio.run(phase(name, count, directory))


def count(name: str, calls: int) -> None:
    """Under callgrind: the phase inside reduce (counted); print the admissions."""
    from scheduler.service.main import tune_collector   # the tree on PYTHONPATH
    tune_collector()
    run_phase("many", 2)   # warm: imports and first-call caches, not counted
    admitted, _ = reduce(lambda _, __: run_phase(name, calls), range(1), None)
    print(admitted)


def per_admission(tree: Path, name: str, calls: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    return per_unit([__file__, "--count", name, str(calls)], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", metavar="REF", nargs="+", default=[])
    parser.add_argument("--batches", type=int, default=40, help="SubmitMany calls (default %(default)s)")
    parser.add_argument("--cycles", type=int, default=1000, help="Submit+Release cycles (default %(default)s)")
    parser.add_argument("--count", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count:
        return count(args.count[0], int(args.count[1]))
    if shutil.which("valgrind") is None:
        sys.exit("bench/claims_path.py needs valgrind (Debian package valgrind)")
    print(f"load average: {os.getloadavg()[0]:.2f}   command: {' '.join([sys.executable, *sys.argv])}")
    phases = (("many", args.batches, "SubmitMany x 100: instructions per admission"),
              ("unary", args.cycles, "Submit + Release: instructions per admit+release cycle"))
    with tempfile.TemporaryDirectory(prefix="pool-instructions-") as scratch:
        trees = [("this tree", ROOT), *((ref, checkout(ref, scratch)) for ref in args.against)]
        for name, calls, label in phases:
            counts = [(ref, per_admission(tree, name, calls)) for ref, tree in trees]
            mine = counts[0][1]
            print(f"{label}: " + ",  ".join(f"{ref} {n:,.0f}" for ref, n in counts)
                  + "".join(f"   (this tree / {ref}: {mine / n:.3f})" for ref, n in counts[1:]))


if __name__ == "__main__":
    main()
