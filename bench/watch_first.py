"""A Watch's first statuses (issue 21 soak): what sending them costs the
scheduler, against a real pool-scheduler subprocess over mutual TLS, this
tree beside --peer trees (e.g. `git worktree add /tmp/old COMMIT`) started in
turn on copies of one ledger.

The ledger (written directly, with a checkpoint: bench/queue_depth.py's
Builder) holds one tenant's --claims claims, half admitted (CPU-only) and
half waiting for a GPU (each with its reason and queue position), and 8
claims holding the GPUs. After start-up, once the scheduler is idle (the
open claims' statuses encoded ahead, claims.warm_listing), an operator
watches the tenant and reads every first status (EVENT_CURRENT), twice:

  shown: the shared listing (service/listing.py) shows the state the watch
         began at (nothing changed since start-up);
  moved: after the first status, a Submit in another tenant and a List of
         it bring the shared listing to a later state while the watch still
         pages the one it began at (the soak's case: Lists and Submits go on
         beside the abuser's Watches).

Printed per tree: the scheduler's CPU (user + system, /proc) per status and
the wall time to read them all, the median of --rounds; and this tree's CPU
as a ratio to each peer's (higher: this tree costs less).

Usage: .venv/bin/python bench/watch_first.py [--claims 10000] [--rounds 3] [--peer DIR ...]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from e2e import Pki, channel, configure, cpu_seconds, registration, scheduler   # bench/e2e.py
from ledger import line                                                # bench/ledger.py
from queue_depth import GPUS, HOST, MEASURED, WAITING, Builder, gpu_claim   # bench/queue_depth.py
from protos.pool.v1 import claims_pb2, claims_pb2_grpc, types_pb2
from scheduler.kernel import ClaimSpec, ClaimState, Resources, WorkerRegistered
from scheduler.service.convert import worker_from

IDLE_S = 0.5   # no CPU used for this long: start-up's warming is done


def build(workdir: Path, pki: Pki, claims: int) -> None:
    """The host with every GPU held, half of `claims` admitted on its CPUs, half waiting for a GPU."""
    configure(workdir, pki)
    b = Builder(workdir)
    b.add([WorkerRegistered(worker_from(registration(HOST), None))])
    b.submit(gpu_claim(f"hold-{i}") for i in range(GPUS))
    b.submit(ClaimSpec(f"run-{i:06}", WAITING, Resources(cpu_millis=1), estimate_uj=1) for i in range(claims // 2))
    b.decide()
    assert all(c.state is ClaimState.ADMITTED for c in b.state.claims.values())
    b.submit(gpu_claim(f"wait-{i:06}") for i in range(claims - claims // 2))   # judged by start-up's first pass
    b.checkpoint()
    b.close()


def idle(pid: int) -> None:
    last, since = cpu_seconds(pid), time.monotonic()
    while time.monotonic() - since < IDLE_S:
        time.sleep(0.1)
        now = cpu_seconds(pid)
        if now != last:
            last, since = now, time.monotonic()


def watched(address: str, pki: Pki, pid: int, claims: int, move: bool) -> tuple[float, float]:
    """Every first status of the tenant's watch read: (the scheduler's CPU s, wall s)."""
    with channel(address, pki, "operator", aio=False) as ch:
        stub = claims_pb2_grpc.ClaimsStub(ch)
        stub.Get(claims_pb2.GetClaimRequest(claim_id="hold-0", tenant=WAITING), timeout=10)   # connected
        cpu, start = cpu_seconds(pid), time.perf_counter()
        watch = stub.Watch(claims_pb2.WatchRequest(tenant=WAITING), timeout=300)
        seen = 0
        for event in watch:
            assert event.kind == claims_pb2.EVENT_CURRENT, event
            seen += 1
            if seen == 1 and move:   # the listing brought to a later state
                stub.Submit(claims_pb2.SubmitRequest(claim_id=f"later-{time.time_ns()}", tenant=MEASURED,
                                                     estimate_uj=1, resources=types_pb2.Resources(cpu_millis=1)),
                            timeout=10)
                stub.List(claims_pb2.ListClaimsRequest(tenant=MEASURED, page_size=1), timeout=10)
            if seen == claims + GPUS:
                break
        wall, used = time.perf_counter() - start, cpu_seconds(pid) - cpu
        watch.cancel()
    assert seen == claims + GPUS, seen
    return used, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--claims", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peer", type=Path, action="append", default=[],
                        help="another checkout (e.g. a git worktree of an older commit), started in turn with this "
                             "tree's on a copy of the same ledger")
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}   load average: {os.getloadavg()[0]:.2f}   "
          f"command: {shlex.join([sys.executable, *sys.argv])}")
    trees = [("this tree", None), *((str(p), p) for p in args.peer)]
    cases = ("shown", "moved")
    figures: dict[tuple[str, str], list[tuple[float, float]]] = {(t, c): [] for t, _ in trees for c in cases}
    n = args.claims + GPUS
    with tempfile.TemporaryDirectory(prefix="pool-watch-", dir=os.environ.get("BENCH_DIR")) as tmp:
        source, pki = Path(tmp) / "built", Pki(Path(tmp) / "pki", 1)
        built = time.perf_counter()
        build(source, pki, args.claims)
        print(f"(ledger of {n:,} claims built in {time.perf_counter() - built:.1f} s)", flush=True)
        for _ in range(args.rounds):
            for label, tree in trees:
                workdir = Path(tmp) / "run"
                shutil.copytree(source, workdir, ignore=shutil.ignore_patterns("scheduler.log", "scheduler.toml"))
                # a peer's code first on the path: its pool-scheduler, with this venv's packages
                env = None if tree is None else {**os.environ, "PYTHONPATH": str(tree)}
                with scheduler(workdir, pki=pki, env=env) as (address, pid):
                    for case in cases:
                        idle(pid)
                        figures[label, case].append(watched(address, pki, pid, args.claims, case == "moved"))
                shutil.rmtree(workdir)
    for case in cases:
        mine = statistics.median(cpu for cpu, _ in figures["this tree", case])
        for label, _ in trees:
            cpu = statistics.median(c for c, _ in figures[label, case])
            wall = statistics.median(w for _, w in figures[label, case])
            line(f"Watch, {n:,} first statuses, {case}" + ("" if label == "this tree" else f" [{label}]"),
                 f"{cpu / n * 1e6:.1f} µs CPU, {wall:.2f} s", "" if label == "this tree" else "it / this tree",
                 None if label == "this tree" else cpu / mine)


if __name__ == "__main__":
    main()
