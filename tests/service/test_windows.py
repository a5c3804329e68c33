"""The `windows` body's columns, in process: what the agents send becomes the
columns exactly, a bad window refuses its batch by name, and the body read
back from the ledger folds to the same state as the live batch."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protos.energy import Grade, split
from protos.pool.v1 import agent_pb2, types_pb2
from scheduler import kernel
from scheduler.kernel import ClusterState
from scheduler.kernel.fast.pmap import PMap
from scheduler.ledger import dcbor
from scheduler.service.windows import evidence
from scheduler.service.config import Limits
from scheduler.service.windows.batch import Windows, batch_columns, windows_body, windows_from_body
from scheduler.service.errors import Refused
from scheduler.service.windows.occupancy import Issued
from scheduler.service.windows.floors import FLOOR_WINDOWS, Floors
from scheduler.service.windows.projections import Observed

HW, MODEL = types_pb2.GRADE_HW_SHUNT, types_pb2.GRADE_MODEL_BASED
METERS = [types_pb2.DeviceMeter(device_id="GPU-0", kind=types_pb2.GPU)]
NOW = 10_000_000_000   # the scheduler's clock in these tests: windows are 100 ns long, well before it


def context(**fields) -> evidence.Context:
    """What the rules check against: one GPU, nothing counted yet, version 0 still good."""
    base = dict(host="h1", device_types=evidence.device_types(METERS), packages=frozenset(), acked=0, ends={},
                now_ns=NOW, limits=Limits(max_window_age_s=1_000),
                occupancy=lambda v: Issued(v, {}) if v == 0 else None)
    return evidence.Context(**{**base, **fields})


def check(w: Windows, **fields) -> None:
    evidence.check_order("h1", w)
    evidence.check(context(**fields), w, [0] * len(w.seq))


def window(seq: int, uj: int | None = 10, shares: tuple = (("unallocated", 10, HW),), **fields) -> agent_pb2.Window:
    w = agent_pb2.Window(device_id="GPU-0", seq=seq, start_ns=seq * 100, end_ns=seq * 100 + 100, grade=HW,
                         shares=[types_pb2.Share(occupant=o, uj=u, grade=g) for o, u, g in shares])
    if uj is not None:
        w.uj = uj
    for name, value in fields.items():
        setattr(w, name, value)
    return w


def batch(*windows: agent_pb2.Window) -> Windows:
    return batch_columns(agent_pb2.WindowBatch(windows=windows))[0]


def test_protobuf_windows_become_the_columns():
    w = batch(window(1, shares=(("a", 4, HW), ("unallocated", 6, MODEL))), window(2, uj=None, shares=()),
              window(3, uj=0, shares=(("a", 0, HW),), device_id="cpu:0"))
    assert w == Windows(["GPU-0", "GPU-0", "cpu:0"], [1, 2, 3], [100, 200, 300], [200, 300, 400], [10, None, 0],
                        ["HwShunt"] * 3, [2, 0, 1], ["a", "unallocated", "a"], [4, 6, 0],
                        ["HwShunt", "ModelBased", "HwShunt"], [None] * 3, [0] * 3)
    assert batch(window(1)).gap is None   # the gap columns exist only in a batch with a gap
    assert batch() == Windows(*([] for _ in Windows._fields[:10]))


def test_the_body_round_trips_through_the_ledger_encoding():
    w = batch(window(1, shares=(("a", 4, HW), ("unallocated", 6, MODEL))), window(2, uj=None, shares=()))
    body = dcbor.decode(dcbor.encode(windows_body("h1", w)))
    assert windows_from_body(body) == ("h1", w)


def test_since_keeps_the_windows_above_a_seq_with_their_shares():
    w = batch(window(1, shares=(("a", 4, HW), ("b", 6, HW))), window(2, uj=None, shares=()), window(3))
    assert w.since(0) is w
    assert w.since(1) == batch(window(2, uj=None, shares=()), window(3))
    assert w.since(3).seq == [] and w.since(3).occupant == []


@pytest.mark.parametrize("bad, problem", [
    (window(2, device_id="GPU-9"), "device 'GPU-9' was not registered"),
    (window(1), "seq must be ≥ 1 and above the seq before it"),
    (window(2, end_ns=200), "end_ns must be after start_ns"),
    (window(2, grade=types_pb2.GRADE_UNSPECIFIED), "the window and each of its shares need a grade"),
    (window(2, shares=(("unallocated", 10, 0),)), "the window and each of its shares need a grade"),
    (window(2, uj=None), "a window with no figure has no shares"),
    (window(2, shares=(("a", 4, HW), ("b", 5, HW))), "shares sum to 9, not 10"),
    (window(2, gap_reason=types_pb2.GAP_COUNTER_RESET), "a window with a figure has no gap reason"),
    (window(2, shares=(("a", 4, HW), ("unallocated", 6, HW))),
     "shares [a=4/HwShunt, unallocated=6/HwShunt] (2) are not occupancy version 0's split: "
     "[unallocated=10/HwShunt] (1)"),
    (window(2, start_ns=150), "start_ns 150 is before the end of the device's previous window, 200"),
    (window(2, uj=10 ** 12, shares=(("unallocated", 10 ** 12, HW),)),
     "1000000000000 µJ in 100 ns is above 1500 W, the most a '' device may draw"),
    (window(2, end_ns=NOW + 11 * 10 ** 9), f"end_ns {NOW + 11 * 10 ** 9} is more than 10 s after the scheduler's clock"),
])
def test_a_bad_window_refuses_the_batch_by_its_seq(bad, problem):
    with pytest.raises(Refused) as refused:
        check(batch(window(1), bad, window(3, device_id="GPU-8")))
    assert str(refused.value) == f"INVALID_WINDOW: window seq {bad.seq} from 'h1': {problem}"


def test_windows_checked_against_what_the_scheduler_holds():
    w = batch(window(5))
    with pytest.raises(Refused, match="seq is more than 3 above the 1 counted"):
        check(w, acked=1, limits=Limits(max_seq_advance=3, max_window_age_s=1_000))
    with pytest.raises(Refused, match="start_ns 500 is before the end of the device's previous window, 501"):
        check(w, ends={"GPU-0": 501})
    with pytest.raises(Refused, match="start_ns 500 is more than 5 s before"):
        check(w, limits=Limits(max_window_age_s=5))
    with pytest.raises(Refused, match="occupancy version 0 was superseded at 0, more than 0 s before"):
        check(w, occupancy=lambda v: Issued(v, {}, 0), limits=Limits(occupancy_grace_s=0, max_window_age_s=1_000))
    with pytest.raises(Refused, match="occupancy version 0 is not one the scheduler sent"):
        check(w, occupancy=lambda v: None)
    check(w, ends={"GPU-0": 500})   # starting where the last one ended is fine


def test_shares_must_be_the_occupancys_own_split():
    held = lambda v: Issued(v, {"GPU-0": {"a": 250, "unallocated": 750}})  # noqa: E731
    evidence.check(context(occupancy=held), batch(window(1, shares=(("a", 3, MODEL), ("unallocated", 7, MODEL)))), [7])
    for shares in ((("a", 10, MODEL),), (("a", 2, MODEL), ("unallocated", 8, MODEL)),
                   (("a", 3, HW), ("unallocated", 7, HW)), (("b", 3, MODEL), ("unallocated", 7, MODEL))):
        with pytest.raises(Refused, match="are not occupancy version 7's split"):
            evidence.check(context(occupancy=held), batch(window(1, shares=shares)), [7])


def test_good_windows_pass():
    check(batch(window(1), window(2, uj=None, shares=()), window(3, device_id="cpu:0")))


def test_the_body_folds_like_the_live_batch():
    w = batch(window(1, shares=(("a", 4, HW), ("unallocated", 6, MODEL))), window(2, uj=None, shares=()))
    live, replayed = Observed(10), Observed(10)
    event = live.fold(ClusterState(), "h1", w, 7)
    assert event == replayed.fold(ClusterState(), *windows_from_body(dcbor.decode(dcbor.encode(windows_body("h1", w)))),
                                  7)
    assert event.window_seq == 2 and list(live.splits(None, 0, "", 8)) == list(replayed.splits(None, 0, "", 8))
    assert [(r.tenant, r.claim_id, r.device_id, r.uj, r.grade) for _, r in live.splits(None, 0, "", 8)] == [
        ("", "a", "GPU-0", 4, "HwShunt"), ("", "unallocated", "GPU-0", 6, "ModelBased")]
    assert list(live.splits(None, 0, "", 7)) == [], "rows of a receipt not yet durable are not served"


OVERFLOW = types_pb2.GAP_SPOOL_OVERFLOW


def test_a_gap_keeps_its_reason_through_the_ledger_and_an_old_body_still_reads():
    w = batch(window(1), window(2, uj=None, shares=(), gap_reason=OVERFLOW, lost_windows=7),
              window(3, uj=None, shares=()))
    assert (w.gap, w.lost) == ([None, "SpoolOverflow", None], [0, 7, 0])
    body = dcbor.decode(dcbor.encode(windows_body("h1", w)))
    assert windows_from_body(body) == ("h1", w)
    assert w.since(1).gap == ["SpoolOverflow", None] and w.since(2).lost == [0]
    old = windows_body("h1", batch(window(1), window(2)))   # a body from before the gap columns
    assert "gap" not in old and windows_from_body(old)[1].gap is None


def test_gaps_are_folded_into_records_and_the_hosts_unaccounted_time():
    observed = Observed(10)
    observed.fold(ClusterState(), "h1", batch(window(1), window(2, uj=None, shares=(), gap_reason=OVERFLOW,
                                                                  lost_windows=3),
                                              window(3, uj=None, shares=())), 7)
    assert [(g.device_id, g.start_ns, g.end_ns, g.reason, g.lost_windows) for g in observed.gaps(None, 0, "", 8)] == [
        ("GPU-0", 200, 300, "SpoolOverflow", 3), ("GPU-0", 300, 400, "Unknown", 0)]
    assert observed.gaps(None, 0, "", 7) == [], "gaps of a receipt not yet durable are not served"
    assert dict(observed.unaccounted_ns) == {("h1", "SpoolOverflow"): 100, ("h1", "Unknown"): 100}
    assert dict(observed.lost_windows) == {"h1": 3}
    assert observed.gaps(None, 350, "", 8) == observed.gaps(None, 0, "", 8)[1:]
    assert observed.gaps(frozenset({"alpha"}), 0, "", 8) == []   # nobody of alpha's was on the device


@given(st.integers(0, 10 ** 15), st.dictionaries(st.sampled_from(["a", "b", "unallocated"]), st.integers(1, 1000),
                                                min_size=1), st.sampled_from(["HwShunt", "ModelBased", "Estimator"]))
def test_expected_shares_are_the_split(uj, weights, grade):
    """evidence.expected_shares' sole-occupant shortcut against the plain split."""
    assert evidence.expected_shares(uj, weights, grade) == [
        (s.occupant, s.uj, s.grade.name) for s in split(uj, weights, Grade[grade])]


def test_the_door_keeps_only_the_windows_above_the_counted_seq():
    """evidence.admit: a resend at or below the host's counted seq is dropped
    (the kernel's rule, kernel.fresh), the rest checked."""
    w = batch(window(1), window(2), window(3))
    fresh, versions = evidence.admit(context(acked=2), w, [0, 0, 0])
    assert fresh.seq == [3] and versions == [0]
    assert [kernel.fresh(ClusterState(acked=PMap({"h1": 2})), "h1", s) for s in w.seq] == [False, False, True]
    with pytest.raises(Refused, match="seq must be"):
        evidence.admit(context(acked=5), batch(window(2), window(1)), [0, 0])   # order first, resends included


def test_a_batch_over_the_size_limit_is_refused_by_the_door():
    evidence.sized(3, Limits(max_windows_per_batch=3))
    with pytest.raises(Refused, match="TOO_LARGE|over the 3 allowed"):
        evidence.sized(4, Limits(max_windows_per_batch=3))


def floors_plainly(batches: list[tuple[str, Windows]]) -> tuple[dict, dict]:
    """floors.Floors, window by window: (each device's idle floor, windows below half of it per host)."""
    floor, seen, below = {}, {}, {}
    for host, w in batches:
        first = 0
        for i, n in enumerate(w.shares):
            shares, first = w.occupant[first:first + n], first + n
            if w.uj[i] is None or w.end_ns[i] <= w.start_ns[i]:
                continue
            key, mean = (host, w.device[i]), w.uj[i] * 1_000_000_000 // (w.end_ns[i] - w.start_ns[i])
            if shares == ["unallocated"]:
                seen[key] = seen.get(key, 0) + 1
                floor[key] = min(floor.get(key, mean), mean)
            elif seen.get(key, 0) >= FLOOR_WINDOWS and 2 * mean < floor[key]:
                below[host] = below.get(host, 0) + 1
    return floor, below


@given(st.lists(st.tuples(st.sampled_from(["h1", "h2"]), st.lists(st.tuples(
    st.sampled_from(["GPU-0", "GPU-1"]), st.one_of(st.none(), st.integers(0, 10 ** 9)), st.integers(-1, 3),
    st.sampled_from([["unallocated"], ["a"], ["a", "unallocated"], []])), max_size=30)), max_size=6))
def test_the_idle_floors_and_the_windows_below_them_are_the_plain_count(batches):
    made = []
    for host, rows in batches:
        start = [i * 10 for i in range(len(rows))]
        made.append((host, Windows([d for d, *_ in rows], list(range(1, len(rows) + 1)), start,
                                   [s + 10 * span for s, (_, _, span, _) in zip(start, rows)],
                                   [uj for _, uj, _, _ in rows], ["HwShunt"] * len(rows),
                                   [len(o) for *_, o in rows], [x for *_, o in rows for x in o],
                                   [0 for *_, o in rows for _ in o], ["HwShunt" for *_, o in rows for _ in o])))
    floors = Floors()
    for host, w in made:
        floors.feed(host, w)
    floor, below = floors_plainly(made)
    assert floors.floor_uw == floor and dict(floors.below) == below


def test_a_busy_window_below_half_the_idle_floor_is_counted_and_logged(caplog):
    s = 1_000_000_000
    floors, idle = Floors(), Windows(["GPU-0"] * 10, list(range(1, 11)), [i * s for i in range(10)],
                                     [(i + 1) * s for i in range(10)], [60_000_000] * 10, ["HwShunt"] * 10, [1] * 10,
                                     ["unallocated"] * 10, [60_000_000] * 10, ["HwShunt"] * 10)
    floors.feed("h1", idle)   # 60 W for ten windows
    busy = Windows(["GPU-0", "GPU-0"], [11, 12], [10 * s, 11 * s], [11 * s, 12 * s], [5_000_000, 40_000_000],
                   ["HwShunt"] * 2, [1, 1], ["job", "job"], [5_000_000, 40_000_000], ["HwShunt"] * 2)
    floors.feed("h1", busy)   # 5 W, then 40 W, with a claim on it
    assert dict(floors.below) == {"h1": 1} and floors.judged() == {("h1", "GPU-0"): 60_000_000}
    assert "host 'h1': window seq 11 on GPU-0 draws 5000000 µW while claims occupy the device" in caplog.text
