"""What one admission or release costs a busy host's occupancy (issue 21's
soak: one tenant holds 50,000 tiny claims, cpu_millis=1, on two hosts), in
this tree and, in the same run, in each git revision given (default: main),
printed as a ratio.

The host: 8 GPUs and two CPU packages, --claims CPU-only claims open on it
(each of them holds both CPU packages). Then --changes changes, a release
and an admission in turn, each a new committed state. Two costs per change,
each the least CPU time (`time.process_time`) of --runs walks through the
same states, in a process of its own per tree (a revision is unpacked from
git, as bench/instructions.py does):

- holders: occupancy.Holders on the new state (what every batch folded and
  every push reads; it was a copy of the host's whole map per change);
- push: the bytes of the SchedulerMessage that pushes the new occupancy to
  the host's agent (occupancy_wire.OccupancyWire where the tree has it, else
  agents.occupancy's message, serialized as gRPC's serializer does);
- a GPU batch, a CPU batch: the weights the evidence rules check the first
  batch after the change by, when its windows name the current version
  (Occupancies.find, then the weights of one GPU, or of the CPU packages).

    .venv/bin/python bench/occupancy.py [--claims N] [--changes N] [--runs N] [--against REF ...]
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
HOST = "w0"


def build(claims: int, changes: int) -> list:
    """The states: --claims open, then one per change."""
    from scheduler.kernel import (ClaimSpec, ClusterState, ConfigApplied, Device, Resources, Tenant, Worker,
                                  WorkerRegistered, apply, decide, release, schedule, submit)
    events = [ConfigApplied((Tenant("root", guarantee_uj=10**15, guarantee_mdev=8000),)),
              WorkerRegistered(Worker(HOST, 10**9, 10**9, 10**9, tuple(Device(f"{HOST}-g{g}", "H200")
                                                                       for g in range(8))))]
    state = reduce(apply, events, ClusterState())
    for i in range(claims):
        state = apply(state, submit(state, ClaimSpec(f"c{i}", "root", Resources(cpu_millis=1), estimate_uj=1), 1))
    state = schedule(state, 1).state
    states = [state]
    for n in range(changes):
        if n % 2:
            event = submit(state, ClaimSpec(f"n{n}", "root", Resources(cpu_millis=1), estimate_uj=1), 2)
        else:
            event = release(state, f"c{n}", 2)
        state = decide(state, [event], 2).state
        states.append(state)
    return states


def measure(claims: int, changes: int, runs: int) -> dict:
    """In this process: each cost per change, the best of `runs` walks."""
    from protos.pool.v1 import agent_pb2, types_pb2
    from scheduler.service.agents import occupancy
    from scheduler.service.windows.batch import CPU_PREFIX
    from scheduler.service.windows.occupancy import Holders, Occupancies
    try:
        from scheduler.service.windows.occupancy_wire import OccupancyWire
    except ImportError:
        OccupancyWire = None
    states = build(claims, changes)
    meters = [types_pb2.DeviceMeter(device_id=f"{HOST}-g{g}", kind=types_pb2.GPU) for g in range(8)]
    meters += [types_pb2.DeviceMeter(device_id=f"cpu:{p}", kind=types_pb2.CPU_PACKAGE) for p in range(2)]

    def pusher():
        if OccupancyWire is not None:
            return OccupancyWire().message
        return lambda state, host, meters, version, held: agent_pb2.SchedulerMessage(
            occupancy=occupancy(state, host, meters, version, lambda s, h: held)).SerializeToString()

    best = {"holders": float("inf"), "push": float("inf"), "gpu": float("inf"), "cpu": float("inf")}
    size = 0
    for _ in range(runs):
        holders, push = Holders(), pusher()
        push(states[0], HOST, meters, 0, holders(states[0], HOST))   # the stream's first push
        answers, spent = [], 0.0
        for state in states[1:]:
            start = time.process_time()
            answers.append(holders(state, HOST))
            spent += time.process_time() - start
        best["holders"] = min(best["holders"], spent / changes)
        spent = 0.0
        for version, (state, held) in enumerate(zip(states[1:], answers), 1):
            start = time.process_time()
            size = len(push(state, HOST, meters, version, held))
            spent += time.process_time() - start
        best["push"] = min(best["push"], spent / changes)
        for name, key in (("gpu", f"{HOST}-g0"), ("cpu", CPU_PREFIX)):
            occupancies, spent = Occupancies(holders), 0.0
            for version, state in enumerate(states[1:], 1):
                start = time.process_time()
                occupancies.find(state, HOST, version, version, 0).weights[key]
                spent += time.process_time() - start
            best[name] = min(best[name], spent / changes)
    return {**best, "bytes": size}


def in_tree(tree: Path, args: argparse.Namespace) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    run = subprocess.run([sys.executable, __file__, "--one", str(args.claims), str(args.changes), str(args.runs)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claims", type=int, default=25_000)
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--against", metavar="REF", nargs="+", default=["main"])
    parser.add_argument("--one", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(*args.one)))
        return
    print(f"cores: {os.cpu_count()}   load average: {os.getloadavg()[0]:.2f}   {args.claims:,} CPU-only claims "
          f"open on one host (8 GPUs, 2 CPU packages), {args.changes} changes")
    with tempfile.TemporaryDirectory() as scratch:
        trees = {"this tree": ROOT, **{ref: checkout(ref, scratch) for ref in args.against}}
        got = {label: in_tree(tree, args) for label, tree in trees.items()}
    mine = got["this tree"]
    for name, what in (("holders", "Holders, per change"), ("push", "occupancy push, per change"),
                       ("gpu", "a GPU batch's weights"), ("cpu", "a CPU batch's weights")):
        for label, figures in got.items():
            ratio = "" if label == "this tree" else f"   this tree takes {mine[name] / figures[name]:.4f}x"
            print(f"{what:<28} {label:<10} {figures[name] * 1000:>9.3f} ms  ({figures['bytes']:,} bytes a push)"
                  f"{ratio}")


if __name__ == "__main__":
    main()
