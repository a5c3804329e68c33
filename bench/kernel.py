"""Admission-kernel speed (issue 3): decisions per second and one explain
across every worker, each beside a full-recompute peer measured in the same
run, at the reference size (1,000 tenants of depth 4, 10,000 open claims,
1,000 workers) and at 10x fewer / 10x more workers and claims.

The peer is the straightforward implementation: before each decision (or
explain) it recomputes every usage roll-up and worker reservation from all
claims (`rebuild`), instead of reading the ones `apply` maintains.

    .venv/bin/python bench/kernel.py [--quick]
"""

from __future__ import annotations

import argparse
import time
from functools import reduce

from scheduler.kernel import (ClaimSpec, ClusterState, ConfigApplied, Device, Reason, Resources, Tenant, Worker,
                              WorkerRegistered, apply, evaluate, explain, rebuild, schedule, submit)
from scheduler.kernel.admission import admit_events

GPUS_PER_WORKER = 8


def tenants(total_uj: int, total_mdev: int) -> list[Tenant]:
    """Root, 10, 100, then 900 leaves: 1,011 nodes, depth 4. Guarantees are
    split evenly with a tenth kept back at each level, so there is surplus."""
    out = [Tenant("root", guarantee_uj=total_uj, guarantee_mdev=total_mdev)]
    level = ["root"]
    for fanout in (10, 10, 9):
        parent_g = {t.name: (t.guarantee_uj, t.guarantee_mdev) for t in out}
        nxt = []
        for parent in level:
            for i in range(fanout):
                name = f"{parent}.{i}" if parent != "root" else f"t{i}"
                g_uj, g_mdev = parent_g[parent]
                out.append(Tenant(name, parent, guarantee_uj=g_uj * 9 // 10 // fanout,
                                  guarantee_mdev=g_mdev * 9 // 10 // fanout, weight=1 + i % 3))
                nxt.append(name)
        level = nxt
    return out


def cluster(workers: int) -> tuple[ClusterState, list[str]]:
    ts = tenants(10**15, workers * GPUS_PER_WORKER * 1000)
    events = [ConfigApplied(tuple(ts))]
    for w in range(workers):
        devices = tuple(Device(f"w{w}-g{i}", "H200") for i in range(GPUS_PER_WORKER))
        events.append(WorkerRegistered(Worker(f"w{w:05}", 128_000, 1_024_000, 4_000_000, devices)))
    leaves = [t.name for t in ts if t.name.count(".") == 2]
    return reduce(apply, events, ClusterState()), leaves


def claim(i: int, leaves: list[str], per_worker_claims: int) -> ClaimSpec:
    """Claims sized so that `per_worker_claims` fill about 80% of a worker."""
    gpu = (1000, 500, 250, 0)[i % 4]
    return ClaimSpec(f"c{i:07}", leaves[(i * 7919) % len(leaves)],
                     Resources(cpu_millis=80_000 // per_worker_claims, memory_mb=800_000 // per_worker_claims,
                               gpu_mdev=gpu),
                     estimate_uj=10**6 + i % 1000, priority=i % 3)


def submit_all(state: ClusterState, specs) -> ClusterState:
    for s in specs:
        state = apply(state, submit(state, s))
    return state


def naive_decide(state: ClusterState, now_ns: int) -> ClusterState:
    """The peer: every decision starts from a full recomputation."""
    for _, _, claim_id in state.pending:
        state = rebuild(state)
        ev = evaluate(state, state.claims[claim_id], now_ns)
        if ev.reason is Reason.ADMISSIBLE:
            state = reduce(apply, admit_events(state, state.claims[claim_id], ev, now_ns), state)
    return state


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def figure(name: str, value: float, unit: str, peer: float, target: str, higher_is_better: bool = True) -> None:
    speedup = value / peer if higher_is_better else peer / value
    ratio = f"{speedup:.0f}x faster than peer"
    print(f"{name:<44} {value:>12,.1f} {unit:<10} target {target:<12} peer {peer:>10.3g}  {ratio}")


def measure(workers: int, open_claims: int, decisions: int, naive_decisions: int, label: str) -> None:
    state, leaves = cluster(workers)
    per_worker = max(1, open_claims // workers) + 1
    state = submit_all(state, (claim(i, leaves, per_worker) for i in range(open_claims)))
    state = schedule(state, 1).state
    admitted = sum(len(ids) for ids in state.open_by_tenant.values())
    fresh = [claim(open_claims + i, leaves, per_worker) for i in range(decisions)]
    queued = submit_all(state, fresh)
    decided, seconds = timed(schedule, queued, 2)
    rate = decisions / seconds
    peer_state = submit_all(state, fresh[:naive_decisions])
    _, peer_seconds = timed(naive_decide, peer_state, 2)
    peer_rate = naive_decisions / peer_seconds
    figure(f"{label} decisions/s ({admitted} open, {workers} workers)", rate, "dec/s", peer_rate, ">= 20,000")

    target = decided.state
    probe = submit_all(target, [ClaimSpec("probe", leaves[0], Resources(cpu_millis=1, gpu_mdev=1000), estimate_uj=1)])
    rounds = 20
    _, seconds = timed(lambda: [explain(probe, "probe") for _ in range(rounds)])
    _, peer_seconds = timed(lambda: explain(rebuild(probe), "probe"))
    figure(f"{label} explain across {workers} workers", seconds / rounds * 1000, "ms", peer_seconds * 1000, "<= 5 ms",
           higher_is_better=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="reference size only, fewer decisions")
    args = parser.parse_args()
    print(f"{'figure':<44} {'value':>12} {'unit':<10} {'target':<19} {'peer':>10}  ratio")
    if args.quick:
        measure(1_000, 10_000, 2_000, 5, "1x")
        return
    measure(100, 1_000, 5_000, 50, "0.1x")
    measure(1_000, 10_000, 5_000, 10, "1x")
    measure(10_000, 100_000, 5_000, 3, "10x")


if __name__ == "__main__":
    main()
