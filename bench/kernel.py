"""Admission-kernel speed (issue 3): decisions per second and one explain
across every worker, each beside a full-recompute peer measured in the same
run, at the reference size (1,000 tenants of depth 4, 10,000 open claims,
1,000 workers) and at 10x fewer / 10x more workers and claims.

A decision is one pending claim judged by `schedule` (admitted, or left
pending with its reason); the rate counts every claim the pass judged. The
peer is the straightforward implementation: before each decision (or explain)
it recomputes every usage roll-up, worker reservation and index from all
claims (`rebuild`), instead of reading the ones `apply` maintains.

Every timing is the process's CPU time (`time.process_time`), the best of
several runs, as `timeit` reports: on a shared machine the other tenants'
load only ever adds time, so the least disturbed run is the best estimate of
the code's own cost. Wall-clock medians on the 2-core box swung 2-3x.

    .venv/bin/python bench/kernel.py [--quick]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from dataclasses import dataclass
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


def best_seconds(runs: int, fn, *args):
    """(the last result, the least CPU time of `runs` calls)."""
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        out = fn(*args)
        best = min(best, time.process_time() - start)
    return out, best


def figure(name: str, value: float, unit: str, target: str, peer: float | None = None,
           higher_is_better: bool = True) -> None:
    if peer is None:
        versus = ""
    else:
        speedup = value / peer if higher_is_better else peer / value
        versus = f"peer {peer:>10,.4g}  {speedup:,.0f}x the peer"
    print(f"{name:<46} {value:>10,.1f} {unit:<7} target {target:<9} {versus}")


def build(workers: int, open_claims: int) -> tuple[ClusterState, list[str], int]:
    """A cluster with `open_claims` submitted and one pass decided over them."""
    state, leaves = cluster(workers)
    per_worker = max(1, open_claims // workers) + 1
    state = submit_all(state, (claim(i, leaves, per_worker) for i in range(open_claims)))
    return schedule(state, 1).state, leaves, per_worker


def with_probe(state: ClusterState, leaves: list[str]) -> ClusterState:
    """The state with one more claim pending, the one explained."""
    return submit_all(state, [ClaimSpec("probe", leaves[0], Resources(cpu_millis=1, gpu_mdev=1000), estimate_uj=1)])


@dataclass
class Size:
    """One cluster size: the queue a pass decides, the state an explain reads,
    and the best times seen (the sizes are timed in turns, see main)."""

    label: str
    workers: int
    open_claims: int
    queued: ClusterState | None = None   # None: measured for explain only
    probe: ClusterState | None = None
    decide_s: float = math.inf
    explain_s: float = math.inf
    decisions: int = 0

    @classmethod
    def make(cls, label: str, workers: int, open_claims: int, fresh: int) -> Size:
        state, leaves, per_worker = build(workers, open_claims)
        size = cls(label, workers, sum(len(ids) for ids in state.open_by_tenant.values()))
        if fresh:
            size.queued = submit_all(state, [claim(open_claims + i, leaves, per_worker) for i in range(fresh)])
            state = schedule(size.queued, 2).state
        size.probe = with_probe(state, leaves)
        return size

    def time(self) -> None:
        if self.queued is not None:
            # back to back, as a scheduler's passes run: the first of a turn starts cold
            decided, seconds = best_seconds(3, schedule, self.queued, 2)
            self.decide_s, self.decisions = min(self.decide_s, seconds), len(decided.reasons)
        self.explain_s = min(self.explain_s, best_seconds(3, explain, self.probe, "probe")[1])

    @property
    def us_per_decision(self) -> float:
        return self.decide_s / self.decisions * 1e6

    def report(self, peer_decisions: int) -> None:
        _, peer_seconds = best_seconds(1, naive_decide, self.queued, peer_decisions, 2)
        figure(f"{self.label} decisions/s ({self.open_claims} open, {self.workers} workers)",
               self.decisions / self.decide_s, "dec/s", ">= 20,000", peer_decisions / peer_seconds)
        _, peer_s = best_seconds(1, lambda: explain(rebuild(self.probe), "probe"))
        figure(f"{self.label} explain across {self.workers} workers", self.explain_s * 1000, "ms", "<= 5 ms",
               peer_s * 1000, higher_is_better=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="reference size only, fewer runs")
    parser.add_argument("--rounds", type=int, default=5, help="turns in which every size is timed")
    parser.add_argument("--explain-at", nargs=2, type=int, metavar=("WORKERS", "CLAIMS"),
                        help="print one explain's best ms at this size alone (a process of its own)")
    args = parser.parse_args()
    if args.explain_at:
        size = Size.make("alone", *args.explain_at, 0)
        tune_collector()
        print(best_seconds(12, explain, size.probe, "probe")[1] * 1000)
        return
    if args.quick:
        sizes = [Size.make("1x", 1_000, 10_000, 2_000)]
        args.rounds = 3
    else:
        sizes = [Size.make("0.1x", 100, 1_000, 5_000), Size.make("1x", 1_000, 10_000, 5_000),
                 Size.make("10x", 10_000, 100_000, 5_000)]
    tune_collector()   # as pool-scheduler does once its state is replayed
    # every size timed once per round, so a slow spell of the machine hits them all
    for _ in range(args.rounds):
        for size in sizes:
            size.time()
    print(f"{'figure':<46} {'value':>10} {'unit':<7} {'target':<16} peer (full recompute)")
    if args.quick:
        sizes[0].report(3)
        return
    for size, peer_decisions in zip(sizes, (20, 5, 2)):  # the peer's decisions cost a rebuild each
        size.report(peer_decisions)
    small, ref, big = sizes
    # Each step is 10x the workers and 10x the open claims. Linear in workers
    # and logarithmic in claims allows 10 * log(10n)/log(n) the cost.
    for name, (a, b), claims in (("0.1x -> 1x", (small, ref), 1_000), ("1x -> 10x", (ref, big), 10_000)):
        limit = 10 * math.log(10 * claims) / math.log(claims)
        figure(f"{name} cost per decision grows", b.us_per_decision / a.us_per_decision, "x", f"<= {limit:.1f}x")
        figure(f"{name} explain time grows", b.explain_s / a.explain_s, "x", f"<= {limit:.1f}x")
    # explain's two dimensions apart, each size in a process of its own (in
    # one process the 10x heap slows every walk over the workers), in turns
    alone = {(1_000, 10_000): math.inf, (10_000, 10_000): math.inf, (1_000, 100_000): math.inf}
    for _ in range(3):
        for key in alone:
            command = [sys.executable, __file__, "--explain-at", *map(str, key)]
            alone[key] = min(alone[key], float(subprocess.run(command, capture_output=True, text=True,
                                                              check=True).stdout))
    one = alone[1_000, 10_000]
    figure("1x alone: explain across 1000 workers", one, "ms", "<= 5 ms")
    figure("1x -> 10x workers alone: explain grows", alone[10_000, 10_000] / one, "x", "<= 10x")
    figure("1x -> 10x open claims alone: explain grows", alone[1_000, 100_000] / one, "x",
           f"<= {math.log(1e5) / math.log(1e4):.2f}x")


if __name__ == "__main__":
    main()
