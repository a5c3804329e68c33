"""What a release costs the kernel with a deep queue, when most of what waits
cannot move (issue 13): `decide` over one Released event with 10,000 claims
pending, in this tree and, in the same run, on the kernel of each git
revision given (default: main), printed as a ratio.

The cluster: 100 workers of 8 GPUs, every GPU held by an admitted claim of
a whole GPU, and one CPU-only claim admitted per worker; 10,000 claims of a
whole GPU pending, from 100 tenants with 10 estimates each (1,000 shapes,
10 claims each), all waiting NO_ELIGIBLE_WORKER. Energy is plentiful. Two
releases are measured:

- a CPU-only claim: it frees no GPU, so nothing can be admitted;
- a GPU claim: it frees one GPU, so the first waiting claim is admitted and
  then nothing more fits.

Each figure is the least CPU time (`time.process_time`) of --runs decisions
on the same state, in a process of its own per tree (the kernel of a
revision is unpacked from git, as bench/instructions.py does), with the
number of claims the decision judged.

    .venv/bin/python bench/release.py [--depth N] [--runs N] [--against REF ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from functools import reduce
from pathlib import Path

from instructions import checkout  # bench/instructions.py

ROOT = Path(__file__).resolve().parent.parent
WORKERS, GPUS, TENANTS, ESTIMATES = 100, 8, 100, 10


def build(depth: int):
    from scheduler.kernel import (ClaimSpec, ClusterState, ConfigApplied, Device, Resources, Tenant, Worker,
                                  WorkerRegistered, apply, schedule, submit)
    tenants = [Tenant("root", guarantee_uj=10**15, guarantee_mdev=WORKERS * GPUS * 1000)]
    tenants += [Tenant(f"t{i:03}", "root", guarantee_uj=10**12, guarantee_mdev=GPUS * 1000) for i in range(TENANTS)]
    events = [ConfigApplied(tuple(tenants))]
    events += [WorkerRegistered(Worker(f"w{w:03}", 64_000, 512_000, 10**6,
                                       tuple(Device(f"w{w:03}-g{g}", "H200") for g in range(GPUS))))
               for w in range(WORKERS)]
    state = reduce(apply, events, ClusterState())

    def add(specs):
        nonlocal state
        for spec in specs:
            state = apply(state, submit(state, spec))
        state = schedule(state, 1).state

    add(ClaimSpec(f"gpu-{i}", f"t{i % TENANTS:03}", Resources(cpu_millis=1000, gpu_mdev=1000), estimate_uj=10**6)
        for i in range(WORKERS * GPUS))
    add(ClaimSpec(f"cpu-{i}", f"t{i % TENANTS:03}", Resources(cpu_millis=1000), estimate_uj=10**6)
        for i in range(WORKERS))
    add(ClaimSpec(f"wait-{i}", f"t{i % TENANTS:03}", Resources(cpu_millis=1000, gpu_mdev=1000),
                  estimate_uj=10**6 + (i // TENANTS) % ESTIMATES) for i in range(depth))
    assert len(state.pending) == depth, "every waiting claim waits"
    return state


def measure(depth: int, runs: int) -> dict:
    """In this process: the two releases, each the best of `runs`."""
    from scheduler.kernel import decide, release
    state = build(depth)
    out = {}
    for name, claim_id in (("cpu", "cpu-0"), ("gpu", "gpu-0")):
        event = release(state, claim_id, 2)
        best = float("inf")
        for _ in range(runs):
            start = time.process_time()
            decision = decide(state, [event], 2)
            best = min(best, time.process_time() - start)
        out[name] = {"s": best, "judged": len(decision.reasons),
                     "admitted": sum(e.kind == "claim_admitted" for e in decision.events)}
    return out


def in_tree(tree: Path, depth: int, runs: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    run = subprocess.run([sys.executable, __file__, "--one", str(depth), str(runs)], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(run.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depth", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--against", metavar="REF", nargs="+", default=["main"])
    parser.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(*args.one)))
        return
    print(f"cores: {os.cpu_count()}   load average: {os.getloadavg()[0]:.2f}   depth: {args.depth:,} pending")
    with tempfile.TemporaryDirectory() as scratch:
        trees = {"this tree": ROOT, **{ref: checkout(ref, scratch) for ref in args.against}}
        got = {label: in_tree(tree, args.depth, args.runs) for label, tree in trees.items()}
    mine = got["this tree"]
    for name, what in (("cpu", "release of a CPU-only claim (admits nothing)"),
                       ("gpu", "release of a GPU claim (admits one)")):
        for label, figures in got.items():
            f = figures[name]
            ratio = "" if label == "this tree" else f"   this tree takes {mine[name]['s'] / f['s']:.4f}x"
            print(f"{what:<46} {label:<10} {f['s'] * 1000:>9.3f} ms  judged {f['judged']:>5}  "
                  f"admitted {f['admitted']}{ratio}")


if __name__ == "__main__":
    main()
