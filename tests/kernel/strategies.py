"""Hypothesis strategies: small random clusters driven by random operations,
with every state and event kept so invariants can be checked after each step."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st
from kit import cluster, gpus

from protos.energy import Grade
from scheduler.kernel import (ClaimSpec, admitted_ids, ClaimSubmitted, ClassStats, ClusterState, MeterDelta, Metered, Placement,
                              Resources, Tenant, WorkClass, apply, progress, release, schedule, submit)
from scheduler.kernel.fast.pmap import PMap
from scheduler.kernel.reasons import ErrorCode, KernelError


@st.composite
def trees(draw) -> list[Tenant]:
    root_uj = draw(st.integers(50, 400))
    root_mdev = draw(st.sampled_from([2000, 4000, 8000]))
    out = [Tenant("root", guarantee_uj=root_uj, guarantee_mdev=root_mdev)]
    names = ["a", "b", "c"][: draw(st.integers(2, 3))]
    left_uj, left_mdev = root_uj, root_mdev
    for name in names:
        g = draw(st.integers(0, left_uj // 2))
        m = draw(st.integers(0, left_mdev // 2))
        left_uj, left_mdev = left_uj - g, left_mdev - m
        out.append(Tenant(name, "root", guarantee_uj=g, guarantee_mdev=m, weight=draw(st.integers(1, 3)),
                          borrow_limit_uj=draw(st.none() | st.integers(0, 100)),
                          lend_limit_uj=draw(st.none() | st.integers(0, 100))))
    if draw(st.booleans()):  # a grandchild under "a"
        a = out[1]
        out.append(Tenant("a1", "a", guarantee_uj=draw(st.integers(0, a.guarantee_uj)),
                          guarantee_mdev=draw(st.integers(0, a.guarantee_mdev)), weight=draw(st.integers(1, 3))))
    return out


claim_specs = st.builds(
    dict,
    tenant=st.sampled_from(["root", "a", "b", "c", "a1"]),
    estimate=st.integers(1, 50),   # positive (RULES §3), and within the smallest root (50)
    by_class=st.booleans(),
    gpu_mdev=st.sampled_from([0, 250, 500, 1000, 2000]),
    memory_mb=st.integers(0, 600),
    exclusive=st.booleans(),
    priority=st.integers(0, 3),
    gang=st.sampled_from([0, 0, 0, 2, 3]),
)

operations = st.lists(st.one_of(
    st.tuples(st.just("submit"), claim_specs),
    st.tuples(st.just("submit"), claim_specs),
    st.tuples(st.just("schedule"),),
    st.tuples(st.just("meter"), st.integers(0, 60), st.sampled_from(list(Grade))),
    st.tuples(st.just("progress"), st.integers(1, 5)),
    st.tuples(st.just("release"), st.integers(0, 10)),
    st.tuples(st.just("schedule"),),
), min_size=1, max_size=25)


def base(tenants: list[Tenant], workers: int = 2) -> ClusterState:
    state = cluster(tenants, [gpus(f"w{i}", 2, memory_mb=1024, max_concurrency=3) for i in range(workers)],
                    classes=(WorkClass("k"),))
    # a class with history, so class-based claims hold a ModelBased figure
    return state._replace(class_stats=PMap({"k": ClassStats(3, 0, 3, 40)}))


@dataclass
class Run:
    states: list[ClusterState]
    events: list = field(default_factory=list)
    decisions: list = field(default_factory=list)


def drive(state: ClusterState, ops, settle: bool = False) -> Run:
    """Apply the operations in turn, keeping each state. With `settle`, the
    state kept is the one before a decision, which then runs (schedule)."""
    run, n, seq = Run([state]), 0, 0
    for op in ops:
        if settle and len(run.states) > 1:
            state = schedule(state, 0).state
        new = []
        if op[0] == "submit":
            d, n = op[1], n + 1
            tenant = d["tenant"] if d["tenant"] in state.tree.nodes else "a"
            members = max(1, d["gang"])
            for m in range(members):
                spec = ClaimSpec(f"c{n}.{m}", tenant,
                                 Resources(memory_mb=d["memory_mb"], gpu_mdev=d["gpu_mdev"]),
                                 Placement(int(d["exclusive"])), None if d["by_class"] else d["estimate"],
                                 "k" if d["by_class"] else "", d["priority"],
                                 f"g{n}" if d["gang"] else "", d["gang"])
                event = submit(state, spec)
                if isinstance(event, KernelError) and event.code is ErrorCode.CLAIM_NEVER_FITS:
                    break   # above the root's guarantee: refused at submission, as the service refuses it
                assert isinstance(event, ClaimSubmitted), event
                run.events.append(event)
                state = apply(state, event)  # the next member's submit sees this one
        elif op[0] == "schedule":
            decision = schedule(state, 0)
            run.decisions.append(decision)
            new = list(decision.events)
        else:
            admitted = sorted(admitted_ids(state))
            if not admitted:
                continue
            target = admitted[op[1] % len(admitted)]
            if op[0] == "meter":
                seq += 1
                new = [Metered(state.claims[target].worker, seq, (MeterDelta(target, op[1], op[2]),))]
            elif op[0] == "progress":
                new = [progress(state, target, state.claims[target].completed_units + op[1])]
            else:
                new = [release(state, target, 1)]
        for event in new:
            state = apply(state, event)
            run.events.append(event)
        run.states.append(state)
    return run


# Contended clusters: guarantees that matter, ModelBased holds that borrow,
# priorities, measured claims, so that lending, taking back and preempting
# by priority all happen (the reference tests need victims to judge).
@st.composite
def contended_trees(draw) -> list[Tenant]:
    root_uj = draw(st.integers(50, 120))
    out = [Tenant("root", guarantee_uj=root_uj, guarantee_mdev=4000)]
    names = ["a", "b", "c"][: draw(st.integers(2, 3))]
    for name in names:
        out.append(Tenant(name, "root", guarantee_uj=draw(st.integers(root_uj // 4, root_uj // len(names))),
                          guarantee_mdev=draw(st.sampled_from([500, 1000, 4000 // len(names)])),
                          weight=draw(st.integers(1, 3)), borrow_limit_uj=draw(st.none() | st.integers(0, 80)),
                          lend_limit_uj=draw(st.none() | st.none() | st.integers(0, 40))))
    return out


contended_claims = st.builds(
    dict, tenant=st.sampled_from(["a", "b", "c"]), estimate=st.sampled_from([5, 10, 20]), by_class=st.booleans(),
    gpu_mdev=st.sampled_from([0, 250, 500, 1000, 1000]), memory_mb=st.sampled_from([0, 300]), exclusive=st.just(False),
    priority=st.integers(0, 3), gang=st.sampled_from([0, 0, 0, 0, 0, 2]))

contended_operations = st.lists(st.one_of(
    st.tuples(st.just("submit"), contended_claims),
    st.tuples(st.just("submit"), contended_claims),
    st.tuples(st.just("submit"), contended_claims),
    st.tuples(st.just("submit"), contended_claims),
    st.tuples(st.just("meter"), st.integers(0, 30), st.sampled_from([Grade.HwShunt, Grade.ModelBased])),
    st.tuples(st.just("meter"), st.integers(0, 30), st.sampled_from([Grade.HwShunt, Grade.ModelBased])),
    st.tuples(st.just("progress"), st.integers(1, 5)),
    st.tuples(st.just("release"), st.integers(0, 10)),
), min_size=4, max_size=24)


def undecided(state: ClusterState, ops) -> list[ClusterState]:
    """The states a decision starts from, as the service makes them: each
    operation's events applied to the state the last decision left, which
    is then decided (schedule) before the next operation."""
    return drive(state, ops, settle=True).states[1:]


# Lenders whose guarantee is lent out: borrowers (ModelBased class holds)
# fill the root, some of them measured and progressing, then the lenders and
# higher-priority claims arrive and must take capacity back.
@st.composite
def lent_trees(draw) -> list[Tenant]:
    lender, borrower = draw(st.integers(40, 100)), draw(st.integers(0, 30))
    spare = draw(st.integers(0, 20))
    return [Tenant("root", guarantee_uj=lender + borrower + spare, guarantee_mdev=4000),
            Tenant("a", "root", guarantee_uj=lender, guarantee_mdev=draw(st.sampled_from([1000, 2000]))),
            Tenant("b", "root", guarantee_uj=borrower, guarantee_mdev=draw(st.sampled_from([0, 1000])),
                   weight=draw(st.integers(1, 3)), lend_limit_uj=draw(st.none() | st.integers(0, 20)))]


def _claim_op(tenant: str, by_class: bool, estimate: int, gpu_mdev: int, priority: int) -> tuple:
    return ("submit", dict(tenant=tenant, estimate=estimate, by_class=by_class, gpu_mdev=gpu_mdev, memory_mb=0,
                           exclusive=False, priority=priority, gang=0))


lent_operations = st.tuples(
    st.lists(st.builds(_claim_op, st.sampled_from(["a", "b"]), st.just(True), st.just(0),
                       st.sampled_from([0, 250, 1000]), st.integers(0, 2)), min_size=1, max_size=5),
    st.lists(st.one_of(st.tuples(st.just("meter"), st.integers(0, 39), st.sampled_from([Grade.HwShunt, Grade.ModelBased])),
                       st.tuples(st.just("progress"), st.integers(1, 5))), max_size=6),
    st.lists(st.builds(_claim_op, st.sampled_from(["a", "a", "b"]), st.booleans(), st.sampled_from([5, 10, 30]),
                       st.sampled_from([0, 250, 1000]), st.integers(0, 3)), min_size=1, max_size=4),
).map(lambda parts: [op for part in parts for op in part])
