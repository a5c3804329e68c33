"""What the kernel alone pays per call with a deep pending queue (issue 13),
in one process, no gRPC, no ledger: the cluster of bench/queue_depth.py (one
host with every GPU held, `depth` claims of one shape waiting for a GPU), and

  a cycle: a CPU-only claim of another tenant submitted (admitted at once)
      and released (a freeing event: every waiting shape is judged again),
  a GPU release: a holder released, which admits the first waiting claim,

each timed at each depth and printed as a ratio to the same at the first
depth that has it (the release needs a claim waiting; the target: the same
cost at any depth).

Usage: .venv/bin/python bench/depth_kernel.py [--depths 0,1000,10000,100000] [--rounds 200]
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

from e2e import GPUS, configure, registration                                  # bench/e2e.py
from ledger import line                                                        # bench/ledger.py
from queue_depth import HOST, MEASURED, gpu_claim                              # bench/queue_depth.py
from scheduler import kernel
from scheduler.kernel import ClaimSpec, Resources, WorkerRegistered
from scheduler.service import config as configuration
from scheduler.service.convert import worker_from


def cluster(depth: int) -> kernel.ClusterState:
    with tempfile.TemporaryDirectory(prefix="pool-depth-") as tmp:
        configure(Path(tmp))
        config = configuration.load(Path(tmp) / "scheduler.toml")
    state = kernel.apply(kernel.ClusterState(), config.config_event())
    state = kernel.apply(state, WorkerRegistered(worker_from(registration(HOST), None)))
    for i in range(GPUS):
        state = kernel.apply(state, kernel.submit(state, gpu_claim(f"hold-{i}")))
    state = kernel.schedule(state, 1).state
    for i in range(depth):
        state = kernel.apply(state, kernel.submit(state, gpu_claim(f"wait-{i}")))
    return kernel.schedule(state, 2).state


def cycles(state: kernel.ClusterState, rounds: int) -> tuple[float, kernel.ClusterState]:
    start = time.perf_counter()
    for n in range(rounds):
        spec = ClaimSpec(f"m{n}", MEASURED, Resources(cpu_millis=1), estimate_uj=1)
        state = kernel.decide(state, [kernel.submit(state, spec)], 3).state
        state = kernel.decide(state, [kernel.release(state, f"m{n}", 4)], 4).state
    return (time.perf_counter() - start) / rounds, state


def gpu_releases(state: kernel.ClusterState, rounds: int) -> float:
    """Each release admits the first waiting claim, which a later round releases."""
    holders = [f"hold-{i}" for i in range(GPUS)]
    start = time.perf_counter()
    for n in range(rounds):
        decision = kernel.decide(state, [kernel.release(state, holders[n % GPUS], 5)], 5)
        state = decision.state
        [admitted] = [e.claim_id for e in decision.events if isinstance(e, kernel.ClaimAdmitted)]
        holders[n % GPUS] = admitted
    return (time.perf_counter() - start) / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--depths", default="0,1000,10000,100000")
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    print(f"cores: {os.cpu_count()}   load average: {os.getloadavg()[0]:.2f}   "
          f"command: {shlex.join([sys.executable, *sys.argv])}")
    print("ratios: the cost at a depth / the same at the first depth")
    base_cycle = base_release = None
    for depth in depths:
        state = cluster(depth)
        cycle_s, state = cycles(state, args.rounds)
        base_cycle = base_cycle or (depth, cycle_s)
        line(f"CPU-only submit + release, {depth:,} pending", f"{cycle_s * 1e3:.3f} ms",
             f"vs {base_cycle[1] * 1e3:.3f} ms at {base_cycle[0]:,}", cycle_s / base_cycle[1])
        if depth:   # with none waiting, a GPU release admits nothing
            release_s = gpu_releases(state, min(args.rounds, depth))
            base_release = base_release or (depth, release_s)
            line(f"GPU release admitting one, {depth:,} pending", f"{release_s * 1e3:.3f} ms",
                 f"vs {base_release[1] * 1e3:.3f} ms at {base_release[0]:,}", release_s / base_release[1])

if __name__ == "__main__":
    main()
