"""Admission-kernel speed (issue 3): decisions per second and one explain
across every worker, each beside a full-recompute peer measured in the same
run, at the reference size (1,000 tenants of depth 4, 10,000 open claims,
1,000 workers) and at 10x fewer / 10x more workers and claims.

A decision is one pending claim judged by `schedule` (admitted, or left
pending with its reason); the rate counts every claim the pass judged. The
peer is the straightforward implementation: before each decision (or explain)
it recomputes every usage roll-up, worker reservation and index from all
claims (`rebuild`), instead of reading the ones `apply` maintains. Every
timing is the median of several runs (the machine may be shared).

    .venv/bin/python bench/kernel.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import reduce

from scheduler.kernel import (ClaimSpec, ClusterState, ConfigApplied, Device, Reason, Resources, Tenant, Worker,
                              WorkerRegistered, apply, evaluate, explain, rebuild, schedule, submit)
from scheduler.kernel.admission import admit_events
from scheduler.service.main import tune_collector

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


def naive_decide(state: ClusterState, count: int, now_ns: int) -> ClusterState:
    """The peer: the first `count` pending claims, each decision starting
    from a full recomputation."""
    for _, _, claim_id in list(state.pending)[:count]:
        state = rebuild(state)
        ev = evaluate(state, state.claims[claim_id], now_ns)
        if ev.reason is Reason.ADMISSIBLE:
            state = reduce(apply, admit_events(state, state.claims[claim_id], ev, now_ns), state)
    return state


def median_seconds(runs: int, fn, *args):
    """(the last result, the median wall time of `runs` calls)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        out = fn(*args)
        times.append(time.perf_counter() - start)
    return out, statistics.median(times)


def figure(name: str, value: float, unit: str, target: str, peer: float | None = None,
           higher_is_better: bool = True) -> None:
    if peer is None:
        versus = ""
    else:
        speedup = value / peer if higher_is_better else peer / value
        versus = f"peer {peer:>10,.4g}  {speedup:,.0f}x the peer"
    print(f"{name:<46} {value:>10,.1f} {unit:<7} target {target:<9} {versus}")


def measure(workers: int, open_claims: int, fresh: int, peer_decisions: int, runs: int, label: str) -> tuple:
    """Decisions/s and explain ms at one size; returns (µs per decision, explain ms)."""
    state, leaves = cluster(workers)
    per_worker = max(1, open_claims // workers) + 1
    state = submit_all(state, (claim(i, leaves, per_worker) for i in range(open_claims)))
    state = schedule(state, 1).state
    admitted = sum(len(ids) for ids in state.open_by_tenant.values())
    queued = submit_all(state, [claim(open_claims + i, leaves, per_worker) for i in range(fresh)])
    tune_collector()   # as pool-scheduler does once its state is replayed
    decided, seconds = median_seconds(runs, schedule, queued, 2)
    rate = len(decided.reasons) / seconds
    _, peer_seconds = median_seconds(1, naive_decide, queued, peer_decisions, 2)
    figure(f"{label} decisions/s ({admitted} open, {workers} workers)", rate, "dec/s", ">= 20,000",
           peer_decisions / peer_seconds)

    probe = submit_all(decided.state, [ClaimSpec("probe", leaves[0], Resources(cpu_millis=1, gpu_mdev=1000),
                                                 estimate_uj=1)])
    _, explain_s = median_seconds(max(5, 4 * runs), explain, probe, "probe")
    _, peer_s = median_seconds(1, lambda: explain(rebuild(probe), "probe"))
    figure(f"{label} explain across {workers} workers", explain_s * 1000, "ms", "<= 5 ms", peer_s * 1000,
           higher_is_better=False)
    return 1e6 / rate, explain_s * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="reference size only, fewer runs")
    args = parser.parse_args()
    print(f"{'figure':<46} {'value':>10} {'unit':<7} {'target':<16} peer (full recompute)")
    if args.quick:
        measure(1_000, 10_000, 2_000, 3, 3, "1x")
        return
    small = measure(100, 1_000, 5_000, 20, 5, "0.1x")
    ref = measure(1_000, 10_000, 5_000, 5, 5, "1x")
    big = measure(10_000, 100_000, 5_000, 2, 3, "10x")
    # 10x the workers and the open claims: linear in workers allows 10x the
    # cost per decision; logarithmic in claims, about log(100k)/log(10k) more.
    for name, scale in (("0.1x -> 1x", (small, ref)), ("1x -> 10x", (ref, big))):
        (d0, e0), (d1, e1) = scale
        figure(f"{name} cost per decision grows", d1 / d0, "x", "<= 10x")
        figure(f"{name} explain time grows", e1 / e0, "x", "<= 10x")


if __name__ == "__main__":
    main()
