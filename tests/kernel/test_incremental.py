"""Incremental re-judging (queue.decide) against the full re-judge
(schedule.schedule): on random clusters and event sequences, deciding only
what each event can make admissible gives the same events and the same
state as re-judging the whole queue, and the reasons computed when asked
(PendingReasons) are those a full re-judge of the settled state gives."""

from __future__ import annotations

from itertools import groupby

from hypothesis import given, settings
from hypothesis import strategies as st
from kit import cluster, gpus
from strategies import (base, contended_operations, contended_trees, drive, lent_operations, lent_trees, operations,
                        trees, undecided)

from protos.energy import Grade
from scheduler.kernel import (ClaimSpec, admitted_ids, ClaimSubmitted, ClassStats, MeterDelta, Metered, PendingReasons, Placement,
                              Reason, Resources, Tenant, WorkClass, WorkerLiveness, WorkerRegistered, apply, decide,
                              evaluate, gangs, progress, release, schedule, submit)
from scheduler.kernel.events import WorkerCordoned
from scheduler.kernel.reasons import ErrorCode, KernelError
from scheduler.kernel.maintenance import cordon
from scheduler.kernel.queue import GangRef, Room, ShapeRef, movable
from scheduler.kernel.fast.shapes import first_of, pending_key, shape_of
from scheduler.kernel.fast.pmap import PMap

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
                if isinstance(event, KernelError) and event.code is ErrorCode.CLAIM_NEVER_FITS:
                    return out   # above the root's guarantee: refused at submission, as the service refuses it
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
    admitted = sorted(admitted_ids(state))
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
    assert late.events == () and late.reasons == ()   # no worker has a GPU free: not even judged
    assert PendingReasons(late.state)["late"] is Reason.NO_ELIGIBLE_WORKER
    freed = decide(late.state, [release(late.state, "x0", 1)], 0)
    assert [e.claim_id for e in freed.events] == ["x1"]  # the first of the shape
    assert [c for c, _ in freed.reasons] == ["x1"]       # judged: the one admitted; the GPU it took was the only one


def _flat():
    from kit import flat
    return flat(a=10**6)


# -- what a freeing event re-judges (queue.Room, fast/movable.py) --------------------------------------

# Few GPUs, tight guarantees: the devices are taken, so what can still be
# admitted is mostly what takes them back (reclaim) or preempts by priority,
# which is what the conditions must not miss.
@st.composite
def _tight_trees(draw):
    root = draw(st.integers(30, 80))
    a = draw(st.integers(root // 4, root // 2))
    return [Tenant("root", guarantee_uj=root, guarantee_mdev=2000),
            Tenant("a", "root", guarantee_uj=a, guarantee_mdev=draw(st.sampled_from([500, 1000]))),
            Tenant("b", "root", guarantee_uj=draw(st.integers(0, root - a)), guarantee_mdev=draw(st.sampled_from([0, 1000])),
                   weight=draw(st.integers(1, 3)), lend_limit_uj=draw(st.none() | st.integers(0, 20)))]


_tight_claims = st.builds(
    dict, tenant=st.sampled_from(["a", "b"]), estimate=st.sampled_from([5, 10, 20]), by_class=st.booleans(),
    gpu_mdev=st.sampled_from([500, 1000, 1000, 0]), memory_mb=st.just(0), exclusive=st.just(False),
    priority=st.integers(0, 3), gang=st.sampled_from([0, 0, 0, 0, 2]))

_tight_operations = st.lists(st.one_of(
    st.tuples(st.just("submit"), _tight_claims),
    st.tuples(st.just("submit"), _tight_claims),
    st.tuples(st.just("submit"), _tight_claims),
    st.tuples(st.just("meter"), st.sampled_from([0, 0, 3, 30]), st.sampled_from([Grade.HwShunt, Grade.ModelBased])),
    st.tuples(st.just("progress"), st.integers(1, 5)),
    st.tuples(st.just("release"), st.integers(0, 10)),
), min_size=4, max_size=24)


def _tight_base(tenants):
    """One worker of two GPUs; class-based claims hold 8 µJ, ModelBased (they may borrow)."""
    return base(tenants, workers=1)._replace(class_stats=PMap({"k": ClassStats(3, 0, 3, 8)}))


_clusters = st.one_of(st.tuples(trees(), operations, st.just(False)),
                      st.tuples(contended_trees(), contended_operations, st.just(True)),
                      st.tuples(lent_trees(), lent_operations, st.just(True)),
                      st.tuples(_tight_trees(), _tight_operations, st.just("tight")))


def _start(tenants, contended):
    return _tight_base(tenants) if contended == "tight" else base(tenants)


def _states(tenants, ops, contended):
    return undecided(_start(tenants, contended), ops) if contended else drive(base(tenants), ops).states


def _plain_movable(state, every_gang=False):
    """The rule over every shape and gang, one by one: the plain reference
    of the index's ranges."""
    room = Room(state)
    every_shape = [shape for shape, _ in groupby(shape for shape, _ in state.shapes.by_shape)]
    return ({ShapeRef(s): first_of(state.shapes, s) for s in every_shape if room.could_admit(s)}
            | {GangRef(g): min(pending_key(state.claims[m]) for m in members) for g, members in state.gangs.items()
               if every_gang or room.gang_could_move(members)})


@settings(max_examples=150, deadline=None)
@given(_clusters, st.booleans())
def test_the_index_finds_exactly_the_shapes_the_rule_allows(cluster, every_gang):
    for state in _states(*cluster):
        assert movable(Room(state), every_gang) == _plain_movable(state, every_gang)


@settings(max_examples=150, deadline=None)
@given(_clusters)
def test_every_claim_that_could_be_admitted_is_one_the_rule_allows(cluster):
    """The conditions are necessary: on any state, settled or not, a claim
    that evaluate would admit (with or without victims) belongs to a shape
    `could_admit` allows, and a gang that would be admitted to one
    `gang_could_move` allows."""
    for state in _states(*cluster):
        room = Room(state)
        for _, _, claim_id in state.pending:
            claim = state.claims[claim_id]
            if claim.spec.gang_id:
                continue
            if evaluate(state, claim).reason is Reason.ADMISSIBLE:
                assert room.could_admit(shape_of(claim.spec)), claim.spec
        for gang_id, members in state.gangs.items():
            judged = gangs.members(state, gang_id)
            if gangs.complete(state, gang_id, judged[0].spec.gang_size) and not gangs.gang_never_fits(state, judged):
                if gangs.decide_gang(state, judged, 0)[0] is Reason.ADMISSIBLE:
                    assert room.gang_could_move(members), gang_id


def _op_events(state, op, n):
    """The events one of strategies' operations brings, undecided ("schedule":
    none), as `_given` makes them: an operation's one figure is both which
    admitted claim and how much, as strategies.drive reads it."""
    if op[0] == "submit":
        return _given(state, ("submit", {**op[1], "copies": 1}), n)
    return [] if op[0] == "schedule" else _given(state, (op[0], op[1], *op[1:]), n)


@settings(max_examples=150, deadline=None)
@given(_clusters)
def test_pruned_decisions_equal_rejudging_everything_where_tenants_lend_borrow_and_outrank(cluster):
    """Contended and lent clusters (strategies.py): releases on one tenant's
    path while others wait, borrowing and taking back, preemption by
    priority, measured claims, gangs; each operation's events decided
    incrementally against a full re-judge."""
    tenants, ops, contended = cluster
    state = schedule(_start(tenants, contended), 0).state
    for n, op in enumerate(ops, start=1):
        given_events = _op_events(state, op, n)
        full, mine = _full(state, given_events, 0), decide(state, given_events, 0)
        assert mine.events == full.events, op
        assert mine.state == full.state
        state = mine.state
        assert schedule(state, 0).events == ()
