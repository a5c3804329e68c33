"""The fast kernel against the plain reference of RULES §3-§6
(tests/kernel/reference.py), on random clusters driven by random
operations: every decision, reason, placement and victim set of a full
re-judge; `evaluate`'s verdict, and the checks explain writes from it; `place()` against the
linear best-fit scan (device picks: test_placement.py); the preemption
order; the victims against an exhaustive search."""

from __future__ import annotations

from itertools import combinations

import reference  # tests/kernel/reference.py
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import (base, contended_operations, contended_trees, drive, lent_operations, lent_trees,
                        operations, trees, undecided)

from scheduler.kernel import Placement, Reason, Resources, check_rows, evaluate, schedule
from scheduler.kernel.admission import CHECKS
from scheduler.kernel.placement import place
from scheduler.kernel.preemption import ordered
from scheduler.kernel.snapshot import ClaimSpec

_SETTINGS = settings(max_examples=150, deadline=None)


def _pending(state):
    return [state.claims[c] for _, _, c in state.pending]


def _states(tenants, ops, contended):
    return undecided(base(tenants), ops) if contended else drive(base(tenants), ops).states


_clusters = st.one_of(st.tuples(trees(), operations, st.just(False)),
                      st.tuples(contended_trees(), contended_operations, st.just(True)),
                      st.tuples(lent_trees(), lent_operations, st.just(True)))


@_SETTINGS
@given(_clusters)
def test_a_full_rejudge_decides_as_the_reference(cluster):
    for state in _states(*cluster):
        mine, plain = schedule(state, 0), reference.rejudge(state, 0)
        assert list(mine.events) == plain.events
        assert dict(mine.reasons) == plain.reasons
        assert mine.state == plain.state


@_SETTINGS
@given(_clusters)
def test_the_checks_explain_writes_agree_with_the_verdict_and_the_reference(cluster):
    for state in _states(*cluster):
        for claim in _pending(state):
            if claim.spec.gang_id:
                continue  # a gang member is judged with its gang (the queue test covers it)
            verdict = evaluate(state, claim)
            checks = check_rows(state, claim, verdict)
            # the first check that failed with a reason is the headline (a failed own pass that
            # goes on to borrow has none)
            failed = [c.reason for c in checks if c.evaluated and not c.ok and c.reason]
            assert (failed[0] if failed else Reason.ADMISSIBLE) is verdict.reason
            order = [step for step, _ in CHECKS]
            ran = [order.index(c.step) for c in checks if c.evaluated]
            assert ran == sorted(set(ran))  # each step once, in RULES §3's order
            plain = reference.judge(state, claim)
            assert (verdict.reason, verdict.hold_uj, verdict.hold_grade, verdict.borrowed,
                    tuple(v.claim_id for v in verdict.victims), verdict.worker, verdict.devices) == tuple(plain)


requests = st.builds(
    lambda cpu, memory, mdev, types, exclusive: ClaimSpec(
        "probe", "a", Resources(cpu_millis=cpu, memory_mb=memory, gpu_mdev=mdev, gpu_types=types),
        Placement(int(exclusive)), estimate_uj=1),
    st.sampled_from([0, 1000, 64000]), st.integers(0, 1100), st.sampled_from([0, 250, 500, 750, 1000, 2000]),
    st.sampled_from([(), ("H200",), ("A100",)]), st.booleans())


@_SETTINGS
@given(trees(), operations, st.lists(requests, min_size=1, max_size=4))
def test_place_is_the_linear_best_fit(tenants, ops, specs):
    for state in drive(base(tenants, workers=3), ops).states:
        for spec in specs:
            if spec.resources.gpu_types and not spec.resources.gpu_mdev:
                continue  # refused at submit
            assert place(state.workers, state.loads, state.free_index, spec) == reference.best_fit(state, spec)


def _suffices(state, claim, hold_uj, victims):
    after = reference.without(state, victims, claim, 0)
    return reference.own_blocker(after, claim.tenant, hold_uj, claim.spec.resources.gpu_mdev) is None


@_SETTINGS
@given(st.one_of(st.tuples(contended_trees(), contended_operations), st.tuples(lent_trees(), lent_operations)))
def test_victims_suffice_and_none_is_spare(cluster):
    """Against every subset of the candidates (small clusters): the victims
    taken let the claim fit its own guarantee, none of them could be left
    out, and a claim fitting its own pass is refused for want of victims
    only when no set of candidates would do."""
    tenants, ops = cluster
    for state in undecided(base(tenants, workers=3), ops):
        for claim in _pending(state):
            if claim.spec.gang_id:
                continue
            ev = evaluate(state, claim)
            candidates = reference.lent_candidates(state, claim)
            if ev.victims:
                victims = list(ev.victims)
                assert _suffices(state, claim, ev.hold_uj, victims)
                for spare in victims:
                    assert not _suffices(state, claim, ev.hold_uj, [v for v in victims if v != spare])
            elif ev.reason is Reason.ENERGY_OWN_PASS and len(candidates) <= 8:
                assert not any(_suffices(state, claim, ev.hold_uj, list(subset))
                               for n in range(len(candidates) + 1) for subset in combinations(candidates, n))


@_SETTINGS
@given(st.one_of(st.tuples(contended_trees(), contended_operations), st.tuples(lent_trees(), lent_operations)))
def test_the_preemption_order_is_the_rulebook_key(cluster):
    tenants, ops = cluster
    for state in undecided(base(tenants, workers=3), ops):
        admitted = reference.admitted(state)
        assert ordered(admitted) == sorted(admitted, key=reference.preemption_key)

