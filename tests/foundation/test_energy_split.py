"""RULES §2 as properties of protos.energy.split."""

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protos.energy import UNALLOCATED, Grade, SplitError, mean_uw, split, sum_graded, with_unallocated, worst

grades = st.sampled_from(list(Grade))
occupant_ids = st.text(alphabet="abcdefghij0123456789-", min_size=1, max_size=6)
weight_maps = st.dictionaries(occupant_ids, st.integers(0, 10_000), min_size=1, max_size=12).filter(
    lambda w: sum(w.values()) > 0)
totals = st.integers(0, 10**15)


@given(totals, weight_maps, grades)
def test_shares_sum_to_total(total, weights, grade):
    assert sum(s.uj for s in split(total, weights, grade)) == total


@given(totals, weight_maps, grades)
def test_each_share_within_one_uj_of_exact(total, weights, grade):
    weight_sum = sum(weights.values())
    for share in split(total, weights, grade):
        exact = Fraction(total * weights[share.occupant], weight_sum)
        assert abs(share.uj - exact) < 1


@given(totals, weight_maps, grades, st.randoms(use_true_random=False))
def test_independent_of_input_order(total, weights, grade, rnd):
    items = list(weights.items())
    rnd.shuffle(items)
    assert split(total, dict(items), grade) == split(total, weights, grade)


@given(totals, weight_maps, grades)
def test_shares_in_occupant_order(total, weights, grade):
    assert [s.occupant for s in split(total, weights, grade)] == sorted(weights)


@given(st.integers(1, 10**9), st.lists(occupant_ids, min_size=2, max_size=8, unique=True), grades)
def test_ties_go_to_smallest_occupant_id(total, occupants, grade):
    shares = split(total, {o: 1 for o in occupants}, grade)
    leftover = total % len(occupants)
    winners = sorted(occupants)[:leftover]
    base = total // len(occupants)
    assert {s.occupant: s.uj for s in shares} == {o: base + (o in winners) for o in occupants}


@given(totals, weight_maps, grades)
def test_grade_never_improves(total, weights, grade):
    assert all(s.grade >= grade for s in split(total, weights, grade))


@given(totals, weight_maps, grades)
def test_two_occupants_are_at_best_model_based(total, weights, grade):
    if sum(1 for w in weights.values() if w > 0) >= 2:
        assert all(s.grade >= Grade.ModelBased for s in split(total, weights, grade))


@given(totals, grades, st.integers(1, 1000))
def test_sole_whole_occupant_keeps_grade(total, grade, weight):
    assert split(total, {"claim": weight}, grade)[0].grade == grade
    # a zero-weight unallocated remainder is not a second occupant
    assert all(s.grade == grade for s in split(total, {"claim": weight, UNALLOCATED: 0}, grade))


def test_partly_held_device_is_a_division():
    shares = split(1000, with_unallocated(1000, {"claim": 600}), Grade.HwShunt)
    assert [(s.occupant, s.uj, s.grade) for s in shares] == [
        ("claim", 600, Grade.ModelBased), (UNALLOCATED, 400, Grade.ModelBased)]


@pytest.mark.parametrize("total, weights, message", [
    (10, {}, "no occupants"),
    (10, {"a": 0, "b": 0}, "sum to 0"),
    (-1, {"a": 1}, "negative"),
    (10, {"a": -1}, "negative"),
    (1.5, {"a": 1}, "integer"),
    (10, {"a": True}, "integer"),
    (10, {"": 1}, "non-empty"),
])
def test_bad_input_is_refused(total, weights, message):
    with pytest.raises(SplitError, match=message):
        split(total, weights, Grade.HwShunt)


def test_unallocated_is_reserved_and_capacity_bounded():
    with pytest.raises(SplitError, match="reserved"):
        with_unallocated(1000, {UNALLOCATED: 1})
    with pytest.raises(SplitError, match="capacity"):
        with_unallocated(1000, {"a": 600, "b": 600})
    assert with_unallocated(1000, {"a": 1000}) == {"a": 1000}


def test_worst_and_mean():
    assert worst([Grade.HwShunt, Grade.Estimator, Grade.ModelBased]) is Grade.Estimator
    with pytest.raises(ValueError):
        worst([])
    assert mean_uw(None, 10**9) is None
    assert mean_uw(5, 0) is None
    assert mean_uw(0, 10**9) == 0
    assert mean_uw(630_270_000, 7_990_000_000) == 78_882_352


def test_gap_reasons_equal_the_wires():
    from protos.energy import GapReason
    from protos.pool.v1 import types_pb2
    wire = {name: number for name, number in types_pb2.GapReason.items() if number}
    assert {f"GAP_{''.join('_' + c if c.isupper() else c for c in r.name).lstrip('_').upper()}": int(r)
            for r in GapReason} == wire


@given(st.lists(st.tuples(st.integers(0, 10**12), st.none() | st.sampled_from(list(Grade)))))
def test_sum_graded_sums_every_part_and_takes_the_worst_grade(parts):
    total, grade = sum_graded(parts)
    assert total == sum(uj for uj, _ in parts)
    graded = [g for _, g in parts if g is not None]
    assert grade == (max(graded) if graded else None)
    assert grade is None or grade is worst(graded)
