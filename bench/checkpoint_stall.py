"""How long a checkpoint holds the event loop (issue 13), in one run: the
part of Engine._checkpoint that runs on the loop (compact, snapshot, det-CBOR
encoding, chunking) at 10,000 and 100,000 claims, each as a ratio of the
plain snapshot (every claim encoded again, as before service/encoded.py) on
the same state in the same run:

  first checkpoint after start-up (every claim encoded: the kept encodings
      are empty),
  the next one, after 1,000 more admissions (only the claims and the
      per-claim map entries that changed are encoded again);
  the longest event-loop step of Engine.keep_encoded's pass over every claim
      (the kept encodings brought up to date between calls, KEEP_CHUNK
      entries a step: after a start-up it runs at once),
  a checkpoint after such a pass and KEEP_EVERY more receipts (128 claims
      submitted and admitted): what a checkpoint holds the loop for while
      keep_encoded runs.

Every call waits while a checkpoint runs (the loop is one thread); one is
taken every `ledger.checkpoint_every` receipts (default 10,000).

Usage: .venv/bin/python bench/checkpoint_stall.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

from ledger import line   # bench/ledger.py: the figure format
from scheduler import kernel
from scheduler.kernel import ClaimSpec, ConfigApplied, Device, Resources, Tenant, Worker, WorkerRegistered
from scheduler.ledger import dcbor, keys
from scheduler.ledger.steward import CHUNK_BYTES, Steward
from scheduler.ledger.sqlite import SqliteStore
from scheduler.service.engine import KEEP_CHUNK, KEEP_EVERY, Engine
from scheduler.service.state import ServiceState, compact, kept
from scheduler.service.main import tune_collector

TENANTS = [f"team{i}" for i in range(4)]
HUGE = 10**17


def cluster(claims: int) -> kernel.ClusterState:
    """bench/e2e.py's tree and hosts with `claims` CPU-only claims admitted, 100 per decision."""
    tree = (Tenant("root", guarantee_uj=HUGE * 4, guarantee_mdev=4 * 10**9),
            *(Tenant(t, "root", guarantee_uj=HUGE, guarantee_mdev=10**9) for t in TENANTS))
    workers = [Worker(f"bench-{h}", cpu_millis=10**9, memory_mb=10**9, disk_mb=10**9,
                      devices=tuple(Device(f"GPU-{h}-{g}", "NVIDIA H200") for g in range(8))) for h in range(4)]
    state = kernel.decide(kernel.ClusterState(), [ConfigApplied(tree), *map(WorkerRegistered, workers)], 0).state
    return admitted(state, claims, "c")


def admitted(state: kernel.ClusterState, claims: int, prefix: str) -> kernel.ClusterState:
    for b in range(0, claims, 100):
        events, scratch = [], state
        for j in range(min(100, claims - b)):
            event = kernel.submit(scratch, ClaimSpec(f"{prefix}-{b}-{j}", TENANTS[j % 4], Resources(cpu_millis=1),
                                                     estimate_uj=1), 1)
            scratch = kernel.apply(scratch, event)
            events.append(event)
        state = kernel.decide(state, events, 1).state
    return state


def with_maps(before: ServiceState, state: kernel.ClusterState) -> ServiceState:
    """`state` with the per-claim maps a checkpoint also holds (each claim's
    receipt seq and who submitted it), `before`'s with the new claims set."""
    seqs, by = before.claim_seq, before.submitted_by
    for claim_id, claim in state.claims.items():
        if claim_id not in seqs:
            seqs, by = seqs.set(claim_id, claim.seq), by.set(claim_id, "operator")
    return before._replace(kernel=state, claim_seq=seqs, submitted_by=by)


def on_loop(engine: Engine, steward: Steward) -> float:
    """Seconds of what _checkpoint and the writer do on the loop: compact, snapshot,
    encode, then cut and hash the chunks (the writer does that a chunk a batch)."""
    start = time.perf_counter()
    engine._latest = compact(engine._latest)
    list(steward.prepare_checkpoint(engine.snapshot(), steward.length))
    return time.perf_counter() - start


def longest_step(engine: Engine) -> float:
    """Seconds of the longest step of a keep_encoded pass to the latest state."""
    longest, passing = 0.0, kept(engine._latest, engine._encoded, KEEP_CHUNK)
    while True:
        start = time.perf_counter()
        done = next(passing, True)
        longest = max(longest, time.perf_counter() - start)
        if done is True:
            return longest


def plain(engine: Engine) -> float:
    """The same with every part encoded again (state.snapshot without kept encodings)."""
    kept, engine._encoded = engine._encoded, None   # the engine's snapshot, every part encoded plainly
    start = time.perf_counter()
    engine._latest = compact(engine._latest)
    data = dcbor.encode(engine.snapshot(), limit=None)
    engine._encoded = kept
    [data[at:at + CHUNK_BYTES] for at in range(0, len(data), CHUNK_BYTES)]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10,000 claims only")
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}   load average: {os.getloadavg()[0]:.2f}   "
          f"command: {shlex.join([sys.executable, *sys.argv])}")
    tune_collector()
    scratch = tempfile.TemporaryDirectory(prefix="pool-checkpoint-stall-")
    steward = Steward.open(SqliteStore(Path(scratch.name) / "ledger.sqlite", create=True), keys.generate())
    for claims in (10_000,) if args.quick else (10_000, 100_000):
        engine = Engine(0)
        engine._latest = with_maps(ServiceState(), cluster(claims))
        reference = plain(engine)
        first = on_loop(engine, steward)
        engine._latest = with_maps(engine._latest, admitted(engine._latest.kernel, 1_000, "more"))
        reference_next = plain(engine)
        following = on_loop(engine, steward)
        line(f"checkpoint on the loop, {claims:,} claims, first after start-up", f"{first * 1000:,.0f} ms",
             f"peer: every claim encoded {reference * 1000:,.0f} ms", first / reference)
        line(f"checkpoint on the loop, {claims:,} claims, after 1,000 more admissions",
             f"{following * 1000:,.0f} ms", f"peer: every claim encoded {reference_next * 1000:,.0f} ms",
             following / reference_next)
        engine = Engine(0)   # a start-up: nothing kept yet
        engine._latest = with_maps(ServiceState(), cluster(claims))
        step = longest_step(engine)
        engine._latest = with_maps(engine._latest, admitted(engine._latest.kernel, KEEP_EVERY // 2, "few"))
        reference_kept = plain(engine)
        after_pass = on_loop(engine, steward)
        line(f"keep_encoded's longest loop step, {claims:,} claims, every claim encoded",
             f"{step * 1000:,.1f} ms", f"peer: every claim encoded {reference_kept * 1000:,.0f} ms",
             step / reference_kept)
        line(f"checkpoint on the loop, {claims:,} claims, after that pass and {KEEP_EVERY} receipts",
             f"{after_pass * 1000:,.0f} ms", f"peer: every claim encoded {reference_kept * 1000:,.0f} ms",
             after_pass / reference_kept)
    steward.close()
    scratch.cleanup()


if __name__ == "__main__":
    main()
