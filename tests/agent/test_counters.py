"""Counters → intervals (RULES §1): wraps, epochs, missing readings and stalls."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent.counters import Counter
from agent.meters.base import Reading
from protos.energy import Grade

S = 1_000_000_000


def feed(counter: Counter, values, epochs=None):
    out = []
    for i, v in enumerate(values):
        reading = None if v is None else Reading(i * S, (v,) if isinstance(v, int) else v,
                                                 0 if epochs is None else epochs[i])
        out.append(counter.step(i * S, reading, "read failed"))
    return out


def test_first_reading_has_no_interval_then_deltas():
    first, *intervals = feed(Counter(Grade.HwShunt, (None,), None), [10, 25, 40])
    assert first is None
    assert [(i.start_ns, i.end_ns, i.uj, i.grade) for i in intervals] == [
        (0, S, 15, Grade.HwShunt), (S, 2 * S, 15, Grade.HwShunt)]


def test_wrap_with_a_known_range():
    intervals = feed(Counter(Grade.HwShunt, (1000,), None), [900, 50])
    assert intervals[1].uj == 1000 - 900 + 50 and intervals[1].gap is None


def test_decrease_without_a_range_is_a_new_epoch_gap_then_measures_again():
    intervals = feed(Counter(Grade.HwShunt, (None,), None), [5000, 100, 300])
    assert intervals[1].uj is None and "new epoch" in intervals[1].gap
    assert intervals[2].uj == 200


def test_meter_reported_restart_is_a_gap_even_when_the_value_grows():
    intervals = feed(Counter(Grade.HwShunt, (None,), None), [100, 500, 700], epochs=[0, 1, 1])
    assert intervals[1].uj is None and "restarted" in intervals[1].gap
    assert intervals[2].uj == 200


def test_missing_reading_gaps_both_windows_it_touches():
    intervals = feed(Counter(Grade.HwShunt, (None,), None), [100, None, 300, 400])
    assert [i.uj for i in intervals[1:]] == [None, None, 100]
    assert "read failed" in intervals[1].gap and "start" in intervals[2].gap


def test_stalled_counter_is_a_gap_and_so_is_its_restart_jump():
    counter = Counter(Grade.HwShunt, (None,), stall_ns=S // 2)
    intervals = feed(counter, [100, 200, 200, 200, 900, 1000])
    assert [i.uj for i in intervals[1:]] == [100, None, None, None, 100]
    assert "stalled" in intervals[2].gap and "after a stall" in intervals[4].gap


def test_flat_shorter_than_the_stall_threshold_is_a_real_zero():
    counter = Counter(Grade.HwShunt, (None,), stall_ns=3 * S)
    assert [i.uj for i in feed(counter, [100, 100, 150])[1:]] == [0, 50]


def test_rapl_zones_wrap_independently_and_sum():
    counter = Counter(Grade.HwShunt, (1000, 500), None)
    intervals = feed(counter, [(990, 10), (20, 490), (30, 5)])
    assert [i.uj for i in intervals[1:]] == [(1000 - 990 + 20) + 480, 10 + (500 - 490 + 5)]


# A counter's life: increments, with occasional resets (a decrease) or lost reads.
steps = st.lists(st.one_of(st.integers(0, 10**9), st.just("reset"), st.just("missing")), max_size=60)


def _values(ops):
    value, values = 10**6, [10**6]
    for op in ops:
        if op == "missing":
            values.append(None)
            continue
        value = value // 3 if op == "reset" else value + op
        values.append(value)
    return values


@given(steps)
def test_property_intervals_are_never_negative_and_gaps_never_zero(ops):
    intervals = feed(Counter(Grade.HwShunt, (None,), None), _values(ops))[1:]
    for interval in intervals:
        assert (interval.uj is None) == (interval.gap is not None)
        assert interval.uj is None or interval.uj >= 0


@given(steps)
def test_property_every_decrease_or_missing_read_is_a_gap(ops):
    values = _values(ops)
    intervals = feed(Counter(Grade.HwShunt, (None,), None), values)[1:]
    for (prev, cur), interval in zip(zip(values, values[1:]), intervals):
        if prev is None or cur is None or cur < prev:
            assert interval.uj is None
        else:
            assert interval.uj == cur - prev


@given(st.integers(1, 10**12), st.lists(st.integers(0, 10**11), min_size=1, max_size=40))
def test_property_wraps_conserve_energy(max_range, increments):
    increments = [i % max_range for i in increments]  # one wrap at most between reads
    raw, values = 0, [0]
    for inc in increments:
        raw += inc
        values.append(raw % max_range)
    intervals = feed(Counter(Grade.HwShunt, (max_range,), None), values)[1:]
    assert sum(i.uj for i in intervals) == raw


from agent.counters import Last, bridged  # noqa: E402
from protos.energy import GapReason  # noqa: E402

KW = 1_000_000_000   # µW


def _last(counters=(10_000_000_000,), identity="nvml:GPU-1:driver=580:load=7:boot=b/0", t=0):
    return Last(t, 1796000000 * S, counters, identity)


def test_a_restart_within_one_epoch_is_bridged_with_the_counters_delta():
    assert bridged(_last(), Reading(2 * S, (10_600_000_000,)), _last().identity, (None,), KW) == (
        600_000_000, None, None)


def test_a_restart_that_cannot_be_proven_is_a_gap_with_its_reason():
    identity = _last().identity
    cases = [
        (_last(), Reading(2 * S, (10_600_000_000,)), None, (None,), GapReason.AgentDown),   # an integrator
        (_last(identity="nvml:GPU-1:driver=580:load=6:boot=b/0"), Reading(2 * S, (10_600_000_000,)), identity,
         (None,), GapReason.CounterReset),                                                 # the driver reloaded
        (_last(), Reading(2 * S, (500,)), identity, (None,), GapReason.CounterReset),       # it went back
        (_last(counters=(1_000_000,)), Reading(2 * S, (1_500_000,)), identity, (None,),
         GapReason.AgentDown),        # small enough to have restarted from 0 in the downtime
        (_last(), Reading(2 * S, (13_000_000_000,)), identity, (None,), GapReason.CounterReset),  # > 1 kW × 2 s
        (_last(counters=(100,)), Reading(2 * S, (200,)), identity, (1_000_000_000,),
         GapReason.AgentDown),        # a RAPL zone of 1 kJ could have wrapped in 2 s at 1 kW
        (_last(counters=None), Reading(2 * S, (200,)), identity, (None,), GapReason.MeterError),
    ]
    for last, reading, now_identity, ranges, reason in cases:
        uj, why, text = bridged(last, reading, now_identity, ranges, KW)
        assert (uj, why) == (None, reason) and text


def test_the_first_interval_after_resume_spans_the_downtime_from_the_persisted_stamp():
    counter = Counter(Grade.HwShunt, (None,), None, KW)
    counter.resume(_last(t=S))
    identity = _last().identity
    interval = counter.step(3 * S, Reading(3 * S, (10_500_000_000,)), unix_ns=1796000002 * S, identity=identity)
    assert (interval.start_ns, interval.end_ns, interval.uj) == (S, 3 * S, 500_000_000)
    assert interval.unix == (1796000000 * S, 1796000002 * S)
    nxt = counter.step(4 * S, Reading(4 * S, (10_600_000_000,)), unix_ns=1796000001 * S, identity=identity)
    assert nxt.unix == (1796000002 * S, 1796000002 * S + 1)   # a wall clock stepped back: stamps still increase
