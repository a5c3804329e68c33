"""Incremental re-judging (schedule.decide) against the full re-judge
(schedule.schedule): on random clusters and event sequences, deciding only
what each event can make admissible gives the same events and the same
state as re-judging the whole queue, and the reasons computed when asked
(PendingReasons) are those a full re-judge of the settled state gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kit import cluster, gpus
from strategies import trees

from protos.energy import Grade
from scheduler.kernel import (ClaimSpec, ClaimSubmitted, ClassStats, MeterDelta, Metered, PendingReasons, Placement,
                              Reason, Resources, WorkClass, WorkerLiveness, WorkerRegistered, apply, decide, progress,
                              release, schedule, submit)
from scheduler.kernel.events import WorkerCordoned
from scheduler.kernel.maintenance import cordon
from scheduler.kernel.pmap import PMap

# few distinct figures, so that claims share shapes and shapes are skipped whole
shaped_claims = st.builds(
    dict,
    tenant=st.sampled_from(["root", "a", "b", "c", "a1"]),
    estimate=st.sampled_from([5, 20, 45]),
    by_class=st.booleans(),
    gpu_mdev=st.sampled_from([0, 500, 1000, 2000]),
    memory_mb=st.sampled_from([0, 300, 600]),
    exclusive=st.booleans(),
    priority=st.integers(0, 2),
    gang=st.sampled_from([0, 0, 0, 0, 2, 3]),
    copies=st.integers(1, 3),
)

steps = st.lists(st.one_of(
    st.tuples(st.just("submit"), shaped_claims),
    st.tuples(st.just("submit"), shaped_claims),
    st.tuples(st.just("submit"), shaped_claims),
    st.tuples(st.just("meter"), st.integers(0, 99), st.integers(0, 60), st.sampled_from(list(Grade))),
    st.tuples(st.just("progress"), st.integers(0, 99), st.integers(1, 5)),
    st.tuples(st.just("release"), st.integers(0, 99)),
    st.tuples(st.just("release"), st.integers(0, 99)),
    st.tuples(st.just("withdraw"), st.integers(0, 99)),
    st.tuples(st.just("worker"), st.integers(0, 2), st.integers(0, 3), st.sampled_from([600, 1024, 2048])),
    st.tuples(st.just("liveness"), st.integers(0, 1), st.booleans()),
    st.tuples(st.just("cordon"), st.integers(0, 1), st.booleans()),
    st.tuples(st.just("tick"), st.integers(0, 150)),
), min_size=1, max_size=30)


def _base(tenants, period_ns):
    state = cluster(tenants, [gpus(f"w{i}", 2, memory_mb=1024, max_concurrency=3) for i in range(2)],
                    classes=(WorkClass("k"),), period_ns=period_ns)
    return state._replace(class_stats=PMap({"k": ClassStats(3, 0, 3, 40)}))


def _given(state, step, n):
    """The events one step brings (what the service passes to a decision)."""
    kind = step[0]
    if kind == "submit":
        d, out = step[1], []
        tenant = d["tenant"] if d["tenant"] in state.tree.nodes else "a"
        for copy in range(1 if d["gang"] else d["copies"]):
            for m in range(max(1, d["gang"])):
                spec = ClaimSpec(f"c{n}.{copy}.{m}", tenant, Resources(memory_mb=d["memory_mb"], gpu_mdev=d["gpu_mdev"]),
                                 Placement(int(d["exclusive"])), None if d["by_class"] else d["estimate"],
                                 "k" if d["by_class"] else "", d["priority"], f"g{n}" if d["gang"] else "", d["gang"])
                event = submit(state, spec)
                assert isinstance(event, ClaimSubmitted), event
                out.append(event)
                state = apply(state, event)
        return out
    if kind == "worker":
        return [WorkerRegistered(gpus(f"w{step[1]}", step[2], memory_mb=step[3], max_concurrency=3))]
    if kind == "liveness":
        return [WorkerLiveness(f"w{step[1]}", step[2])] if f"w{step[1]}" in state.workers else []
    if kind == "cordon":
        event = cordon(state, f"w{step[1]}", step[2])
        return [event] if isinstance(event, WorkerCordoned) else []
    if kind == "tick":
        return []
    if kind == "withdraw":
        waiting = [c for _, _, c in state.pending]
        return [release(state, waiting[step[1] % len(waiting)], 1)] if waiting else []
    admitted = sorted(c for t in state.open_by_tenant for c in state.open_by_tenant[t])
    if not admitted:
        return []
    target = admitted[step[1] % len(admitted)]
    if kind == "meter":
        return [Metered(state.claims[target].worker, n, (MeterDelta(target, step[2], step[3]),))]
    if kind == "progress":
        return [progress(state, target, state.claims[target].completed_units + step[2])]
    return [release(state, target, 1)]


def _full(state, given, now_ns):
    for event in given:
        state = apply(state, event)
    return schedule(state, now_ns)


@settings(max_examples=300, deadline=None)
@given(trees(), st.sampled_from([0, 100]), steps)
def test_deciding_incrementally_equals_rejudging_everything(tenants, period_ns, plan):
    state = _base(tenants, period_ns)
    state = schedule(state, 0).state  # settled, as a decision leaves it
    now = 0
    for n, step in enumerate(plan, start=1):
        if step[0] == "tick":
            now += step[1]
        given = _given(state, step, n)
        full, mine = _full(state, given, now), decide(state, given, now)
        assert mine.events == full.events, step
        assert mine.state == full.state
        state = mine.state
        again = schedule(state, now)
        assert again.events == ()  # a decision leaves the queue settled
        assert dict(PendingReasons(state, now)) == dict(again.reasons)


def test_a_new_claim_behind_a_waiting_one_of_its_shape_is_not_judged():
    """The rest of a shape waits with its first claim: a submission costs
    nothing more than finding its shape, whatever the queue's depth."""
    state = schedule(cluster(_flat(), [gpus("w0", 1)]), 0).state
    specs = [ClaimSpec(f"x{i}", "a", Resources(gpu_mdev=1000), estimate_uj=10) for i in range(50)]
    for s in specs:
        state = decide(state, [submit(state, s)], 0).state
    assert state.claims["x0"].state.name == "ADMITTED"
    late = decide(state, [submit(state, ClaimSpec("late", "a", Resources(gpu_mdev=1000), estimate_uj=10))], 0)
    assert late.events == () and late.reasons == (("x1", Reason.NO_ELIGIBLE_WORKER),)
    freed = decide(late.state, [release(late.state, "x0", 1)], 0)
    assert [e.claim_id for e in freed.events] == ["x1"]  # the first of the shape
    assert [c for c, _ in freed.reasons] == ["x1", "x2"]     # judged: the one admitted, and the next that waits


def _flat():
    from kit import flat
    return flat(a=10**6)
