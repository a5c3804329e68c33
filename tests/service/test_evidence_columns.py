"""The evidence rules' speed trick against the rules themselves: on random
batches, good and hostile, each rule's whole-column test (`Rule.holds`) says
a batch holds only when no window breaks the rule, and `evidence.check`
refuses exactly what `check_plainly` (window by window, rule by rule)
refuses, with the same words."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protos.energy import NS_PER_S, mean_uw
from protos.pool.v1 import types_pb2
from scheduler.service.windows import evidence
from scheduler.service.windows.columns import Derived, mean_uw_plainly, previous_plainly, sums_plainly
from scheduler.service.config import Limits
from scheduler.service.errors import Refused
from scheduler.service.windows.occupancy import Issued
from scheduler.service.windows.batch import CPU_PREFIX, Windows
from scheduler.service.windows.splits_held import device_weights, expected_shares, shares_hold

NOW = 1_000 * NS_PER_S
METERS = [types_pb2.DeviceMeter(device_id="GPU-0", kind=types_pb2.GPU, device_type="NVIDIA H200"),
          types_pb2.DeviceMeter(device_id="GPU-1", kind=types_pb2.GPU),
          types_pb2.DeviceMeter(device_id="cpu:0", kind=types_pb2.CPU_PACKAGE)]
DEVICES = ["GPU-0", "GPU-1", "cpu:0", "cpu:7", "GPU-9", "cpu:bad id"]   # the last three were not registered
GRADES = ["HwShunt", "ModelBased", "Estimator"]
OCCUPANTS = ["a", "b", "unallocated", "z"]
# the versions a batch may name: 0 (none yet), a sole occupant, a split, and one never sent (99)
ISSUED = {0: {}, 5: {"GPU-0": {"a": 1000}, CPU_PREFIX: {"a": 4}},
          7: {"GPU-0": {"a": 250, "b": 250, "unallocated": 500}, "GPU-1": {"b": 1000},
              CPU_PREFIX: {"a": 3, "b": 1, "unallocated": 4}}}


@st.composite
def batches(draw, clean: bool | None = None):
    """A batch as the body's columns, its versions and the context it is checked in.
    Most windows tile their device and carry their occupancy's own split, so
    that good batches are common; each part may be broken, except in a clean
    batch (a third of them), whose windows all pass."""
    clean = not draw(st.integers(0, 2)) if clean is None else clean
    calm = draw(st.sampled_from([1, 6, 30]))   # how rare broken parts are in a batch that has them

    def maybe(odds, bad, good):
        return draw(bad) if not clean and not draw(st.integers(0, odds * calm)) else draw(good)
    superseded = {v: maybe(1, st.one_of(st.none(), st.integers(0, 2 * NOW)), st.none()) for v in ISSUED}
    limits = Limits(max_seq_advance=maybe(2, st.just(5), st.just(1_000_000)), clock_skew_s=10, max_window_age_s=500,
                    occupancy_grace_s=draw(st.sampled_from([0, 60])),
                    max_power_w={"NVIDIA H200": maybe(2, st.sampled_from([0, 1]), st.just(1_000))})
    acked = draw(st.integers(0, 3))
    ends = draw(st.dictionaries(st.sampled_from(DEVICES), st.integers(0, NOW), max_size=3))
    columns = {name: [] for name in Windows._fields[:10]}
    gaps, lost, mean, versions, seq = [], [], [], [], acked
    one = draw(st.sampled_from([None, 0, 5, 7]))   # the version every window names, or each its own
    last = dict(ends)
    for _ in range(draw(st.integers(0, 8))):
        device = maybe(9, st.sampled_from(DEVICES), st.sampled_from(DEVICES[:3]))
        seq += draw(st.sampled_from([1, 1, 1, 2, 7]))
        start = max(last.get(device, 0), NOW - 100 * NS_PER_S) + maybe(3, st.sampled_from([5, -1]), st.just(0))
        start = maybe(19, st.sampled_from([0, NOW + 20 * NS_PER_S, 1 << 63]), st.just(start))
        end = start + maybe(4, st.sampled_from([10, 0, -5, 1 << 62]), st.just(NS_PER_S))
        last[device] = end
        uj = maybe(3, st.sampled_from([None, 0, 7, 1_000, 900_000_000, 10 ** 15]), st.integers(0, 10 ** 9))
        grade = maybe(9, st.sampled_from([None, *GRADES]), st.sampled_from(GRADES))
        version = maybe(3, st.sampled_from([7, 99]), st.sampled_from([0, 5, 7]) if one is None else st.just(one))
        weights = device_weights(Issued(version, ISSUED.get(version, {})), device, frozenset({"cpu:0"}))
        if uj is not None and grade is not None and (clean or draw(st.integers(0, 3))):
            shares = expected_shares(uj, weights, grade)
            if maybe(1, st.just(True), st.just(False)):   # nearly right: one thing of one share changed
                k = draw(st.integers(0, len(shares) - 1))
                occupant, share_uj, share_grade = shares[k]
                shares[k] = draw(st.sampled_from([(draw(st.sampled_from(OCCUPANTS)), share_uj, share_grade),
                                                  (occupant, share_uj + 1, share_grade),
                                                  (occupant, share_uj, draw(st.sampled_from(GRADES)))]))
        elif uj is None and draw(st.booleans()):
            shares = []
        else:
            shares = draw(st.lists(st.tuples(st.sampled_from(OCCUPANTS), st.integers(0, 10 ** 9),
                                             st.sampled_from([None, *GRADES])), max_size=3))
        for name, value in zip(Windows._fields, (device, seq, start, end, uj, grade, len(shares))):
            columns[name].append(value)
        for occupant, share_uj, share_grade in shares:
            columns["occupant"].append(occupant)
            columns["share_uj"].append(share_uj)
            columns["share_grade"].append(share_grade)
        gaps.append(maybe(6, st.just("99"), st.sampled_from([None, "CounterReset", "SpoolOverflow"])) if uj is None
                    else maybe(9, st.just("CounterReset"), st.none()))
        allowed = evidence.lost_allowed(start, end)
        lost.append(maybe(6, st.sampled_from([allowed + 1, 2 ** 32 - 1]), st.integers(0, min(allowed, 9)))
                    if uj is None else maybe(9, st.just(3), st.just(0)))
        stated = mean_uw(uj, end - start)
        mean.append(maybe(6, st.sampled_from([None if stated is None else stated + 1, 5]),
                          st.sampled_from([stated, None]) if stated is not None else st.none()))
        versions.append(version)
    with_gaps = any(g is not None for g in gaps) or None in columns["uj"] or any(lost)
    windows = Windows(**columns, gap=gaps if with_gaps else None, lost=lost if with_gaps else None)
    context = evidence.Context(
        "h1", evidence.device_types(METERS), frozenset({"cpu:0"}), acked, ends, NOW, limits,
        lambda v: Issued(v, ISSUED[v], superseded[v]) if v in ISSUED else None)
    return context, windows, versions, mean


def check_plainly(ctx: evidence.Context, windows: Windows, versions: list[int], mean: list | None = None) -> None:
    """`evidence.check` without the speed trick: window by window, rule by rule
    (the reference `check` is tested against)."""
    rules = evidence._rules(ctx, windows, versions, mean)
    for i in range(len(windows.seq)):
        for rule in rules:
            if rule.broken(i):
                evidence._refuse(ctx.host, windows, i, rule.says)


def refusal(check, context, windows, versions, mean=None) -> str | None:
    try:
        check(context, windows, versions, mean)
    except Refused as refused:
        return str(refused)
    return None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_column_tests_hold_only_when_no_window_breaks_a_rule_and_check_is_the_plain_check(case):
    context, windows, versions, mean = case
    for rule in evidence._rules(context, windows, versions, mean):
        if rule.holds():
            assert not any(map(rule.broken, range(len(windows.seq)))), rule.says
    assert refusal(evidence.check, *case) == refusal(check_plainly, *case)


@settings(max_examples=100, deadline=None)
@given(batches(clean=True), st.data())
def test_a_good_batch_with_one_share_changed_is_refused_as_the_plain_check_refuses_it(case, data):
    """The column tests' own ground: a good batch, then one occupant, µJ or
    grade of one share changed."""
    context, windows, versions, mean = case
    assert refusal(evidence.check, *case) is None
    if not windows.occupant:
        return
    k = data.draw(st.integers(0, len(windows.occupant) - 1))
    column = data.draw(st.sampled_from(["occupant", "share_uj", "share_grade"]))
    value = data.draw({"occupant": st.sampled_from(OCCUPANTS), "share_uj": st.integers(0, 10 ** 9),
                       "share_grade": st.sampled_from(GRADES)}[column])
    changed = windows._replace(**{column: [*getattr(windows, column)[:k], value, *getattr(windows, column)[k + 1:]]})
    case = context, changed, versions, mean
    assert refusal(evidence.check, *case) == refusal(check_plainly, *case)


def test_the_batches_are_good_and_bad_and_take_both_ways_of_the_split_test():
    """The generator is worth its runs: it makes good batches, bad ones, and
    good ones through each of shares_hold's two paths (a test that can fail)."""
    seen = set()

    @settings(max_examples=150, deadline=None, database=None)
    @given(batches())
    def tally(case):
        context, windows, versions, _ = case
        entry = context.occupancy
        good = refusal(check_plainly, *case) is None
        holds = shares_hold(windows, versions, entry, context.packages, context.limits.occupancy_grace_s)
        sole = holds and windows.seq and windows.shares == [1] * len(windows.seq) and None not in windows.uj
        seen.add((good, bool(holds), bool(sole)))

    tally()
    assert {(True, True, True), (True, True, False), (False, False, False)} <= seen


@pytest.mark.parametrize("grade", GRADES)
def test_a_sole_occupant_batch_holds_at_column_speed(grade):
    """The common batch (every device idle, unallocated takes each window whole)
    holds; change one share and it does not."""
    n = 50
    windows = Windows(["GPU-0", "GPU-1"] * (n // 2), list(range(1, n + 1)), [i * 10 for i in range(n)],
                      [i * 10 + 10 for i in range(n)], [7] * n, [grade] * n, [1] * n, ["unallocated"] * n, [7] * n,
                      [grade] * n)
    entry = lambda v: Issued(v, {})  # noqa: E731
    assert shares_hold(windows, [0] * n, entry, frozenset(), 60)
    windows.share_uj[-1] = 6
    assert not shares_hold(windows, [0] * n, entry, frozenset(), 60)


@settings(max_examples=100, deadline=None)
@given(batches(), st.integers(0, 3))
def test_derived_columns_equal_their_plain_computation(case, period):
    """columns.Derived's shortcuts (one share each; devices in a fixed order)
    against the plain sums and previous ends, also on batches made periodic."""
    context, windows, _, _ = case
    if period and windows.seq:   # the same batch with its devices cycling through `period` of them
        windows = windows._replace(device=[DEVICES[i % period] for i in range(len(windows.seq))])
    derived = Derived(windows, context.ends)
    assert derived.sums == sums_plainly(windows, derived.bounds)
    assert derived.previous == previous_plainly(context.ends, windows)
    assert derived.mean_uw == mean_uw_plainly(windows)
    owner = windows.window_of_shares()
    if len(owner) == len(windows.occupant):   # Windows.per_share, which Observed.fold uses, likewise
        assert windows.per_share(windows.end_ns) == [windows.end_ns[i] for i in owner]
