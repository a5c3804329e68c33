"""Loom's resource-admission scenario (issue 3), step by step."""

from __future__ import annotations

from kit import cluster, flat, run, spec, submitted

from scheduler.kernel import ClaimState, Placement, Reason, Worker, apply, explain, release


def _worker(**fields) -> Worker:
    return Worker("w1", cpu_millis=4000, memory_mb=1024, disk_mb=1000, **fields)


def _field(explanation, worker_id, name):
    worker = next(w for w in explanation.workers if w.worker == worker_id)
    return worker, next(f for f in worker.fields if f.field == name)


def test_second_600mb_claim_waits_then_follows_the_release():
    state = submitted(cluster(flat(a=10**6), [_worker()]), spec("c1", memory_mb=600), spec("c2", memory_mb=600))
    state, reasons, _ = run(state)
    assert state.claims["c1"].state is ClaimState.ADMITTED
    assert reasons["c2"] is Reason.NO_ELIGIBLE_WORKER
    why = explain(state, "c2")
    assert why.reason is Reason.NO_ELIGIBLE_WORKER
    worker, memory = _field(why, "w1", "memory_mb")
    assert (worker.ok, worker.reason) == (False, Reason.RESOURCE_RESERVATION_UNAVAILABLE)
    assert (memory.capacity, memory.reserved, memory.available_before) == (1024, 600, 424)
    assert (memory.available_after, memory.shortfall) == (-176, 176)

    state = run(state, 5)[0]  # nothing changes without a release
    assert state.claims["c2"].state is ClaimState.PENDING
    state = apply(state, release(state, "c1", 10))
    state, reasons, _ = run(state, 10)
    assert state.claims["c2"].state is ClaimState.ADMITTED and state.claims["c2"].worker == "w1"


def test_exclusive_waits_for_an_empty_worker_and_blocks_shared_behind_it():
    state = submitted(cluster(flat(a=10**6), [_worker()]), spec("s1", memory_mb=100))
    state, _, _ = run(state)
    state = submitted(state, spec("x", memory_mb=100, placement=Placement.PLACEMENT_EXCLUSIVE))
    state, reasons, _ = run(state)
    assert reasons["x"] is Reason.NO_ELIGIBLE_WORKER
    assert explain(state, "x").workers[0].reason is Reason.EXCLUSIVE_WORKER_BUSY

    state = apply(state, release(state, "s1", 5))
    state, _, _ = run(state, 5)
    assert state.claims["x"].state is ClaimState.ADMITTED
    state = submitted(state, spec("s2", memory_mb=100))
    state, reasons, _ = run(state, 6)
    assert reasons["s2"] is Reason.NO_ELIGIBLE_WORKER
    assert explain(state, "s2").workers[0].reason is Reason.WORKER_HAS_EXCLUSIVE_TASK


def test_concurrency_cap_of_one():
    state = submitted(cluster(flat(a=10**6), [_worker(max_concurrency=1)]),
                      spec("c1", memory_mb=10), spec("c2", memory_mb=10))
    state, reasons, _ = run(state)
    assert reasons == {"c1": Reason.ADMISSIBLE, "c2": Reason.NO_ELIGIBLE_WORKER}
    why = explain(state, "c2")
    assert why.workers[0].reason is Reason.WORKER_CONCURRENCY_REACHED
    concurrency = why.workers[0].fields[-1]
    assert (concurrency.field, concurrency.capacity, concurrency.reserved, concurrency.shortfall) == ("concurrency", 1, 1, 1)
