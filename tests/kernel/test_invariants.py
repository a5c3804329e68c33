"""Property tests: the invariants of issue 3 over random clusters and random
operation sequences, checked after every step."""

from __future__ import annotations

from functools import reduce

from hypothesis import given
from hypothesis import strategies as st
from strategies import base, drive, operations, trees

from protos.energy import Grade
from scheduler.kernel import (ClaimAdmitted, ClaimState, Preempted, Reason, admitted_ids, apply, event_from_body, rebuild,
                              schedule)
from scheduler.kernel.events import ClaimSubmitted
from scheduler.kernel.fast import ranks
from scheduler.kernel.fast.pmap import PMap
from scheduler.kernel.fast.sortedseq import SortedSeq
from scheduler.kernel.rollup import Rollup


def _admitted(state):
    return [state.claims[c] for c in admitted_ids(state)]


@given(trees(), operations)
def test_root_total_and_node_allowances_hold(tenants, ops):
    run = drive(base(tenants), ops)
    for state in run.states:
        tree = state.tree
        root = state.usage[tree.root]
        assert root.energy.total <= tree.nodes[tree.root].guarantee_uj + _overrun(state, tree.root)
        assert root.devices.total <= tree.nodes[tree.root].guarantee_mdev
        for name in tree.order:
            node, u = tree.nodes[name], state.usage[name]
            if node.borrow_limit_uj is not None and name != tree.root:
                assert u.energy.total <= node.guarantee_uj + node.borrow_limit_uj + _overrun(state, name)


def _overrun(state, node):
    """Measured energy above holds is not admitted, it happens: RULES §3 shows
    it rather than absorbing it, so the bounds allow for it."""
    return sum(max(0, c.measured_uj - c.hold_uj) for c in _admitted(state) if node in state.tree.path(c.tenant)) + \
        sum(state.claims[c].settled_uj for c in state.settled if node in state.tree.path(state.claims[c].tenant))


@given(trees(), operations)
def test_admissions_keep_the_root_within_its_total(tenants, ops):
    """Stronger, at the moment of each decision: an admission never takes
    the root above its guarantee counting holds."""
    run = drive(base(tenants), ops)
    for decision in run.decisions:
        for event in decision.events:
            if isinstance(event, ClaimAdmitted):
                assert event.hold_uj >= 0
        after = decision.state
        root = after.tree.root
        if any(isinstance(e, ClaimAdmitted) for e in decision.events):
            assert after.usage[root].energy.total <= after.tree.nodes[root].guarantee_uj + _overrun(after, root)


@given(trees(), operations)
def test_an_estimator_claim_never_borrows(tenants, ops):
    run = drive(base(tenants), ops)
    for state in run.states:
        for claim in _admitted(state):
            if claim.hold_grade is Grade.Estimator:
                assert not claim.borrowed


@given(trees(), operations)
def test_a_gang_is_never_partly_admitted(tenants, ops):
    run = drive(base(tenants), ops)
    for state in run.states:
        gangs: dict[str, set] = {}
        for claim in state.claims.values():
            if claim.spec.gang_id and claim.state is not ClaimState.PENDING and claim.admitted_seq:
                gangs.setdefault(claim.spec.gang_id, set()).add(claim.admitted_seq)
        for gang_id, seqs in gangs.items():
            members = [c for c in state.claims.values() if c.spec.gang_id == gang_id]
            admitted = [c for c in members if c.admitted_seq]
            assert len(admitted) in (0, members[0].spec.gang_size)
    for decision in run.decisions:
        admitted = [e.claim_id for e in decision.events if isinstance(e, ClaimAdmitted)]
        for claim_id in admitted:
            spec = decision.state.claims[claim_id].spec
            if spec.gang_id:
                same = [c for c in admitted if decision.state.claims[c].spec.gang_id == spec.gang_id]
                assert len(same) == spec.gang_size


@given(trees(), operations)
def test_no_two_claims_preempt_each_other_in_turn(tenants, ops):
    run = drive(base(tenants), ops)
    pairs = {(e.by_claim, e.claim_id) for e in run.events if isinstance(e, Preempted)}
    assert not any((b, a) in pairs for a, b in pairs)
    for event in run.events:
        if isinstance(event, Preempted):
            victim = run.states[-1].claims[event.claim_id]
            by = run.states[-1].claims[event.by_claim]
            assert not by.borrowed
            assert victim.borrowed or (victim.tenant == by.tenant and victim.spec.priority < by.spec.priority)


@given(trees(), operations)
def test_incremental_indexes_equal_a_full_rebuild(tenants, ops):
    for state in drive(base(tenants), ops).states:
        assert rebuild(state) == state


@given(trees(), operations)
def test_replay_of_event_bodies_rebuilds_the_same_state(tenants, ops):
    start = base(tenants)
    run = drive(start, ops)
    decoded = [event_from_body(e.kind, e.to_body()) for e in run.events]
    assert decoded == run.events
    assert reduce(apply, decoded, start) == run.states[-1]
    for decision in run.decisions:
        assert decision.events == tuple(event_from_body(e.kind, e.to_body()) for e in decision.events)


def _body_values_are_cbor_friendly(value):
    if isinstance(value, dict):
        return all(isinstance(k, str) and _body_values_are_cbor_friendly(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_body_values_are_cbor_friendly(v) for v in value)
    return value is None or type(value) in (int, str, bytes, bool)


@given(trees(), operations)
def test_bodies_hold_only_cbor_friendly_values(tenants, ops):
    run = drive(base(tenants), ops)
    for event in run.events:
        assert _body_values_are_cbor_friendly(event.to_body())


@given(trees(), operations, st.randoms(use_true_random=False))
def test_decisions_do_not_depend_on_insertion_order(tenants, ops, rnd):
    """The same claims submitted in another order of dict insertion (same
    sequence numbers) and worker registration order decide alike."""
    start = base(tenants)
    run = drive(start, ops)
    submitted = [e for e in run.events if isinstance(e, ClaimSubmitted)]
    shuffled = submitted[:]
    rnd.shuffle(shuffled)
    workers = list(start.workers.values())
    rnd.shuffle(workers)
    from kit import cluster
    other = cluster(list(reversed(start.tree.nodes.values())), workers,
                    classes=tuple(start.classes.values()))._replace(class_stats=start.class_stats)
    first = reduce(apply, submitted, start)
    second = reduce(apply, shuffled, other)
    from scheduler.kernel import schedule
    a, b = schedule(first, 0), schedule(second, 0)
    assert a.events == b.events and a.reasons == b.reasons


@given(trees(), operations)
def test_release_replaces_the_hold_with_the_actual(tenants, ops):
    run = drive(base(tenants), ops)
    for before, after in zip(run.states, run.states[1:]):
        for claim_id in after.settled:
            if claim_id in before.settled:
                continue
            was, now = before.claims[claim_id], after.claims[claim_id]
            if now.state is ClaimState.RELEASED and was.state is ClaimState.ADMITTED:
                expected = was.measured_uj if was.measured_grade is not None else was.hold_uj
                assert now.settled_uj == expected
                delta = after.usage[now.tenant].energy.direct - before.usage[now.tenant].energy.direct
                assert delta == expected - was.usage_uj


@given(trees(), operations)
def test_reasons_cover_each_pending_claim_once(tenants, ops):
    for decision in drive(base(tenants), ops).decisions:
        ids = [c for c, _ in decision.reasons]
        assert len(ids) == len(set(ids))
        assert all(r is not Reason.REASON_UNSPECIFIED for _, r in decision.reasons)


def _contents(value):
    """A plain copy of a state's contents, to compare after the fact."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return tuple(_contents(v) for v in value)
    if isinstance(value, PMap):
        return {k: _contents(v) for k, v in value.items()}
    if isinstance(value, (SortedSeq, list)):
        return [_contents(v) for v in value]
    if isinstance(value, Rollup):
        return list(value.energy), list(value.devices)
    return value


@given(trees(), operations)
def test_a_schedule_pass_leaves_its_input_untouched(tenants, ops):
    """schedule edits its batch in place (edit.py): the state it starts from
    reads the same afterwards, and the state it returns is the persistent
    fold of its events."""
    for state in drive(base(tenants), ops).states:
        before = _contents(state)
        decision = schedule(state, 0)
        assert _contents(state) == before
        assert decision.state == reduce(apply, decision.events, state)


@given(trees(), operations)
def test_the_priority_index_answers_as_the_admitted_claims_filtered(tenants, ops):
    """fast/ranks.py against its plain twin, a walk of the claims: the lowest
    priority a tenant holds and its claims below each priority, on every
    state of a run."""
    for state in drive(base(tenants), ops).states:
        for tenant in state.tree.order:
            assert ranks.lowest(state.admitted_by_tenant, tenant) == ranks.lowest_plain(state.claims, tenant)
            held = {c.spec.priority for c in state.claims.values() if c.tenant == tenant}
            for priority in held | {p + 1 for p in held} | {-(2 ** 31), 2 ** 31}:
                assert ranks.below(state.admitted_by_tenant, tenant, priority) == ranks.below_plain(
                    state.claims, tenant, priority)
