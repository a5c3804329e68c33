"""Occupancy splits (RULES §2) applied to windows."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.occupancy import Occupancy
from agent.windows import Window
from protos.energy import UNALLOCATED, Grade, SplitError
from protos.pool.v1 import agent_pb2


def window(uj, device="GPU-1", grade=Grade.HwShunt):
    return Window(device, 1, 0, 10**9, uj, grade, None if uj is None else uj)


def occupancy(version, devices):
    return agent_pb2.Occupancy(version=version, devices=[
        agent_pb2.DeviceOccupancy(device_id=d, capacity=cap, occupants=occ) for d, (cap, occ) in devices.items()])


def test_unknown_device_is_wholly_unallocated_and_keeps_its_grade():
    w = Occupancy().apply(window(1000))
    assert [(s.occupant, s.uj, s.grade) for s in w.shares] == [(UNALLOCATED, 1000, Grade.HwShunt)]


def test_claims_and_the_remainder_share_the_total_and_degrade():
    occ = Occupancy()
    occ.update(occupancy(3, {"GPU-1": (1000, {"a": 500, "b": 250})}))
    w = occ.apply(window(1001))
    assert {s.occupant: s.uj for s in w.shares} == {"a": 501, "b": 250, UNALLOCATED: 250}
    assert {s.grade for s in w.shares} == {Grade.ModelBased} and w.occupancy_version == 3


def test_a_sole_claim_on_the_whole_device_keeps_hwshunt():
    occ = Occupancy()
    occ.update(occupancy(1, {"GPU-1": (1000, {"a": 1000})}))
    assert [(s.occupant, s.grade) for s in occ.apply(window(7)).shares] == [("a", Grade.HwShunt)]


def test_cpu_package_weighted_by_cpu_millis():
    occ = Occupancy({"cpu:0": 16000})
    occ.update(occupancy(1, {"cpu:0": (16000, {"a": 4000})}))
    shares = {s.occupant: s.uj for s in occ.apply(window(1600, "cpu:0")).shares}
    assert shares == {"a": 400, UNALLOCATED: 1200}


def test_a_window_without_a_figure_has_no_shares():
    assert Occupancy().apply(window(None)).shares == ()


def test_an_overfull_occupancy_is_refused_whole_and_the_previous_kept():
    occ = Occupancy()
    occ.update(occupancy(1, {"GPU-1": (1000, {"a": 1000})}))
    with pytest.raises(SplitError):
        occ.update(occupancy(2, {"GPU-1": (1000, {"a": 800, "b": 300})}))
    assert occ.apply(window(5)).occupancy_version == 1


def test_an_older_version_never_replaces_a_newer_one():
    occ = Occupancy()
    occ.update(occupancy(5, {"GPU-1": (1000, {"a": 1000})}))
    occ.update(occupancy(4, {"GPU-1": (1000, {})}))
    assert occ.apply(window(5)).occupancy_version == 5


@given(st.integers(0, 10**13), st.dictionaries(st.text("abcdef", min_size=1, max_size=4),
                                                st.integers(0, 250), max_size=4),
       st.sampled_from(list(Grade)))
def test_property_shares_conserve_the_window_and_never_improve_the_grade(total, claims, grade):
    occ = Occupancy()
    occ.update(occupancy(1, {"GPU-1": (1000, claims)}))
    w = occ.apply(window(total, grade=grade))
    assert sum(s.uj for s in w.shares) == total
    assert all(s.grade >= grade for s in w.shares)
