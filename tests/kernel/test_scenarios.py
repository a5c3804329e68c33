"""Scenario tests: each rule of RULES §3–§8 on a small, hand-built cluster."""

from __future__ import annotations


import pytest
from kit import cluster, flat, gpus, run, spec, submitted

from protos.energy import Grade
from scheduler.kernel import (CheckStep, ClaimState, ClassStats, ErrorCode, IdlePolicy, IdleVerdict, KernelError,
                              MeterDelta, Metered, Observation, Placement, Preempted, Reason, Tenant, Threshold, Tier,
                              TreeError, WorkClass, apply, derived_estimate, explain, idle_verdicts, load_tree,
                              preemption_order, reclamation_order, release, submit)
from scheduler.kernel.fast.pmap import PMap

GPU = gpus("w1", 4)


def lender_borrower():
    """a and b each guarantee 100 µJ of a 200 µJ root."""
    tenants = [Tenant("root", guarantee_uj=200, guarantee_mdev=4000),
               Tenant("a", "root", guarantee_uj=100, guarantee_mdev=2000),
               Tenant("b", "root", guarantee_uj=100, guarantee_mdev=2000)]
    state = cluster(tenants, [GPU], classes=(WorkClass("k"),))
    return state._replace(class_stats=PMap({"k": ClassStats(3, 0, 3, 150)}))


def test_a_modelbased_claim_borrows_and_an_estimator_claim_may_not():
    state = submitted(lender_borrower(), spec("model", "b", None, work_class="k"), spec("guess", "b", 150))
    state, reasons, _ = run(state)
    assert reasons == {"model": Reason.ADMISSIBLE, "guess": Reason.ESTIMATOR_MAY_NOT_BORROW}
    assert state.claims["model"].borrowed and state.claims["model"].hold_grade is Grade.ModelBased
    checks = {c.step: c for c in explain(state, "guess").checks}
    assert not checks[CheckStep.ESTIMATOR_GRADE_CHECK].ok
    assert not checks[CheckStep.ENERGY_SURPLUS_PASS_CHECK].evaluated  # grade tested before any surplus


def test_lent_capacity_is_reclaimed_for_the_lender():
    state = submitted(lender_borrower(), spec("borrow", "b", None, work_class="k"))
    state, _, _ = run(state)
    # measured, so preempting it frees its hold (an unmeasured actual is its hold)
    state = apply(state, Metered("w1", 1, (MeterDelta("borrow", 20, Grade.HwShunt),)))
    state = submitted(state, spec("own", "a", 100))
    state, reasons, decision = run(state)
    assert reasons["own"] is Reason.ADMISSIBLE
    preempted = [e for e in decision.events if isinstance(e, Preempted)]
    assert [(e.claim_id, e.by_claim) for e in preempted] == [("borrow", "own")]
    assert state.claims["borrow"].state is ClaimState.PREEMPTED


def test_priority_preempts_within_a_tenant_only():
    state = submitted(lender_borrower(), spec("low", "a", 100, priority=0))
    state, _, _ = run(state)
    state = apply(state, Metered("w1", 1, (MeterDelta("low", 30, Grade.HwShunt),)))
    state = submitted(state, spec("high", "a", 70, priority=5), spec("other", "b", 100, priority=9))
    state, reasons, decision = run(state)
    assert reasons["high"] is Reason.ADMISSIBLE and reasons["other"] is Reason.ADMISSIBLE
    assert [(e.claim_id, e.by_claim) for e in decision.events if isinstance(e, Preempted)] == [("low", "high")]


def test_a_victim_that_frees_nothing_is_not_taken():
    """RULES §6, only as many victims as needed: an unmeasured claim settles
    at its hold, so preempting it frees no energy; it is passed over even
    though it comes first in the order (more recently admitted)."""
    state = submitted(lender_borrower(), spec("measured", "a", 40))
    state, _, _ = run(state)
    state = submitted(state, spec("unmeasured", "a", 40))
    state, _, _ = run(state)
    state = apply(state, Metered("w1", 1, (MeterDelta("measured", 10, Grade.HwShunt),)))  # settles at 10: frees 30
    state = submitted(state, spec("high", "a", 40, priority=1))
    state, reasons, decision = run(state)
    assert reasons["high"] is Reason.ADMISSIBLE
    assert [e.claim_id for e in decision.events if isinstance(e, Preempted)] == ["measured"]
    assert state.claims["unmeasured"].state is ClaimState.ADMITTED


def test_preemption_order_compares_uj_per_unit_exactly():
    state = submitted(cluster(flat(a=10**6), [GPU]), *(spec(c, "a", 1) for c in ("x", "y", "z", "u")))
    state, _, _ = run(state)
    for claim_id, uj, units in (("x", 10, 3), ("y", 7, 2), ("z", 1000, 0)):
        state = apply(state, Metered("w1", state.acked.get("w1", 0) + 1, (MeterDelta(claim_id, uj, Grade.HwShunt),)))
        if units:
            from scheduler.kernel import progress
            state = apply(state, progress(state, claim_id, units))
    order = preemption_order(state)
    # y: 3.5 µJ/unit is worse than x: 3.33; z completed nothing, so it is unmeasured
    assert [(v.claim_id, v.tier) for v in order.order] == [
        ("y", Tier.MEASURED), ("x", Tier.MEASURED), ("u", Tier.UNMEASURED), ("z", Tier.UNMEASURED)]


def test_weighted_share_caps_a_borrower():
    tenants = [Tenant("root", guarantee_uj=100, guarantee_mdev=4000),
               Tenant("idle", "root", guarantee_uj=60, guarantee_mdev=1000),
               Tenant("a", "root", guarantee_uj=10, guarantee_mdev=1000, weight=1),
               Tenant("b", "root", guarantee_uj=10, guarantee_mdev=1000, weight=3)]
    state = cluster(tenants, [GPU], classes=(WorkClass("k"),))._replace(class_stats=PMap({"k": ClassStats(3, 0, 3, 30)}))
    # b borrows 20 above its guarantee; a then asks to borrow 20 too
    state = submitted(state, spec("b1", "b", None, work_class="k"))
    state, _, _ = run(state)
    state = submitted(state, spec("a1", "a", None, work_class="k"))
    state, reasons, _ = run(state)
    # surplus: 100 - 10 - 10 - 0 (idle unused counts as lendable) -> pool 80; a's share 80*1/4 = 20 -> fits
    assert reasons["a1"] is Reason.ADMISSIBLE
    state = submitted(state, spec("a2", "a", 1))
    state = submitted(state, spec("a3", "a", None, work_class="k"))
    state, reasons, _ = run(state)
    assert reasons["a3"] is Reason.ENERGY_SURPLUS  # a would be 50 over, its share is 20


def test_a_gang_larger_than_the_cluster_is_refused():
    state = submitted(cluster(flat(a=10**6), [GPU]),
                      *(spec(f"g{i}", gpu_mdev=2000, gang_id="g", gang_size=3) for i in range(3)))
    state, reasons, _ = run(state)
    assert set(reasons.values()) == {Reason.GANG_NEVER_FITS}
    assert all(state.claims[f"g{i}"].state is ClaimState.REFUSED for i in range(3))


def test_an_incomplete_gang_holds_nothing_then_is_admitted_whole():
    state = submitted(cluster(flat(a=10**6), [GPU]), spec("g0", gpu_mdev=1000, gang_id="g", gang_size=2))
    state, reasons, _ = run(state)
    assert reasons == {"g0": Reason.GANG_INCOMPLETE} and state.usage["a"].energy.total == 0
    state = submitted(state, spec("g1", gpu_mdev=1000, gang_id="g", gang_size=2))
    state, reasons, _ = run(state)
    assert reasons == {"g0": Reason.ADMISSIBLE, "g1": Reason.ADMISSIBLE}


def test_tree_errors_name_the_node():
    with pytest.raises(TreeError, match="'a'.*children's guarantee_uj sum to 20"):
        load_tree([Tenant("root", guarantee_uj=100), Tenant("a", "root", guarantee_uj=10),
                   Tenant("a1", "a", guarantee_uj=20)])
    with pytest.raises(TreeError, match="'x': unknown parent 'nope'"):
        load_tree([Tenant("root"), Tenant("x", "nope")])
    with pytest.raises(TreeError, match="weight must be >= 1"):
        load_tree([Tenant("root"), Tenant("x", "root", weight=0)])
    with pytest.raises(TreeError, match="cycle"):
        load_tree([Tenant("root"), Tenant("x", "y"), Tenant("y", "x")])


def test_submit_refusals_are_typed():
    state = lender_borrower()
    cases = {
        ErrorCode.UNKNOWN_TENANT: spec("c", "nobody"),
        ErrorCode.UNKNOWN_WORK_CLASS: spec("c", "a", None, work_class="nope"),
        ErrorCode.INVALID_CLAIM: spec("c", "a", gpu_mdev=1500),
    }
    for code, s in cases.items():
        error = submit(state, s)
        assert isinstance(error, KernelError) and error.code is code
    empty = state._replace(classes=PMap({"k": WorkClass("k"), "new": WorkClass("new")}))
    assert submit(empty, spec("c", "a", None, work_class="new")).code is ErrorCode.EMPTY_WORK_CLASS
    assert submit(empty, spec("c", "a", 5, work_class="new")).spec.work_class == "new"
    assert submit(state, spec("c", "a", gpu_types=("H200",))).field == "resources.gpu_types"


def test_derived_estimate_is_the_largest_eligible_observation():
    state = cluster(flat(a=10**6), [GPU], classes=(WorkClass("k", required=2),))
    for i, (uj, grade) in enumerate(((50, Grade.HwShunt), (900, Grade.Estimator), (70, Grade.ModelBased))):
        state = submitted(state, spec(f"c{i}", work_class="k", estimate=1))  # an empty class needs an estimate
        state, _, _ = run(state)
        state = apply(state, Metered("w1", i + 1, (MeterDelta(f"c{i}", uj, grade),)))
        state = apply(state, release(state, f"c{i}", 1))
    estimate = derived_estimate(state, "k")
    assert (estimate.estimate_uj, estimate.grade) == (70, Grade.ModelBased)
    assert (estimate.observations, estimate.excluded_estimator, estimate.eligible, estimate.required) == (3, 1, 2, 2)


def test_metered_windows_count_once_and_overrun_is_flagged():
    state = submitted(cluster(flat(a=10**6), [GPU]), spec("c", estimate=10))
    state, _, _ = run(state)
    window = Metered("w1", 1, (MeterDelta("c", 15, Grade.HwShunt),))
    state = apply(apply(state, window), window)
    claim = state.claims["c"]
    assert (claim.measured_uj, claim.overrun, state.usage["a"].energy.total) == (15, True, 15)


def test_settled_actuals_count_only_in_their_period():
    state = submitted(cluster(flat(a=10**6), [GPU], period_ns=100), spec("c", estimate=10))
    state, _, _ = run(state, 5)
    state = apply(state, release(state, "c", 6))
    assert state.usage["a"].energy.total == 10  # no measurement: the hold stands as the actual
    state, _, decision = run(state, 150)
    assert state.period_index == 1 and state.usage["a"].energy.total == 0


def _idle_cluster(policy):
    state = submitted(cluster(flat(a=10**6), [GPU], idle=policy), spec("g", gpu_mdev=500), spec("none"))
    return run(state)[0]


POLICY = IdlePolicy(window_ns=100, thresholds=(Threshold("H200", 100_000_000),))


def test_idle_verdicts_in_their_normative_order():
    state = _idle_cluster(POLICY)
    # threshold for half a GPU: 50 W. 1 J over 100 ns is far above it; 0 µJ is below.
    cases = {
        None: IdleVerdict.NO_VERDICT,
        Observation(0, 50, 0, Grade.HwShunt): IdleVerdict.NO_VERDICT,        # shorter than the window
        Observation(0, 100, None, Grade.HwShunt): IdleVerdict.NO_VERDICT,    # no figure
        Observation(0, 100, 0, Grade.Estimator): IdleVerdict.UNKNOWN,        # a guess of 0 W is not idle
        Observation(0, 100, 0, Grade.ModelBased): IdleVerdict.IDLE,
        Observation(0, 100, 10**6, Grade.HwShunt): IdleVerdict.BUSY,
    }
    for observation, expected in cases.items():
        verdicts = {v.claim_id: v for v in idle_verdicts(state, {"g": observation} if observation else {})}
        assert verdicts["g"].verdict is expected, observation
        assert verdicts["none"].verdict is IdleVerdict.NOTHING_HELD
        assert verdicts["g"].threshold_uw == 50_000_000
        assert reclamation_order(tuple(verdicts.values())) == (("g",) if expected is IdleVerdict.IDLE else ())


def test_explain_of_a_claim_that_is_not_pending():
    state = submitted(cluster(flat(a=10**6), [GPU]), spec("c"))
    state, _, _ = run(state)
    why = explain(state, "c")
    assert (why.state, why.reason, why.queue_position) == (ClaimState.ADMITTED, Reason.ADMISSIBLE, 0)
    assert explain(state, "nope").code is ErrorCode.UNKNOWN_CLAIM


def test_exclusive_gpu_placement_picks_devices():
    """Shared claims pack w1's devices (a fraction on the fullest device that
    fits, whole GPUs lowest id first); the exclusive one cannot join them
    and takes w2 alone."""
    state = submitted(cluster(flat(a=10**6), [GPU, gpus("w2", 4)]), spec("f", gpu_mdev=250),
                      spec("x", gpu_mdev=2000), spec("e", placement=Placement.PLACEMENT_SHARED, gpu_mdev=750),
                      spec("ex", placement=Placement.PLACEMENT_EXCLUSIVE, gpu_mdev=2000))
    state, reasons, _ = run(state)
    assert set(reasons.values()) == {Reason.ADMISSIBLE}
    held = {c: [(d.device_id, d.mdev) for d in state.claims[c].devices] for c in ("f", "x", "e", "ex")}
    assert held == {"f": [("w1-gpu0", 250)], "x": [("w1-gpu1", 1000), ("w1-gpu2", 1000)], "e": [("w1-gpu0", 750)],
                    "ex": [("w2-gpu0", 1000), ("w2-gpu1", 1000)]}
    assert state.loads["w2"].exclusive == 1 and state.loads["w1"].exclusive == 0
