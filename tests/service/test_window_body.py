"""window_body.prepared against the plain way (steward.prepare, then
receipts.check_size): on random and hostile bodies the same Prepared (equal
body, the same key order, the same bytes) or the same error; and every batch
an agent can send takes the column way."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from protos.pool.v1 import agent_pb2, types_pb2
from scheduler.ledger import dcbor
from scheduler.ledger.receipts import ReceiptTooLarge, check_size
from scheduler.ledger.steward import prepare
from scheduler.service.windows import window_body
from scheduler.service.windows.batch import TEXT, WINDOWS, Windows, WireWindows, batch_columns, windows_body

U64 = (1 << 64) - 1
HOSTILE = st.one_of(st.sampled_from([-(1 << 64) - 1, 1 << 64, 1 << 70, True, False, "\ud800", "é", 0.5]),
                    st.floats(), st.binary(max_size=3), st.tuples(st.integers(0, 9)),
                    st.lists(st.integers(0, 9), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(0, 9),
                                                                             max_size=1))
PLAIN = st.one_of(st.integers(-(1 << 64), U64), st.none(), st.text(alphabet="abcGPU-0:._", max_size=12))


@st.composite
def columns(draw):
    """Mostly a flat list of plain items; else one with a hostile item in it, or a hostile value."""
    column = draw(st.lists(PLAIN, max_size=8))
    how = draw(st.integers(0, 9))
    if how == 0:
        return draw(st.one_of(HOSTILE, st.tuples(PLAIN, PLAIN), st.text(max_size=3)))
    if how <= 3:
        column.insert(draw(st.integers(0, len(column))), draw(HOSTILE))
    return column


COLUMN = columns()
KEYS = st.sampled_from(["worker", *Windows._fields, "é", "zz"])


def outcome(make):
    try:
        item = make()
    except Exception as error:   # the same error, by type and words
        return type(error), str(error)
    return item, list(item.body), dcbor.encode_normalized(item.body)


def plainly(body, time_ns, actor):
    item = prepare(WINDOWS, body, time_ns, actor=actor)
    check_size(item.kind, item.body)
    return item


@settings(max_examples=300, deadline=None)
@example({"seq": [1, 1 << 64]}, 5, None)
@example({"uj": [None, -(1 << 64) - 1], "worker": "h"}, 5, None)
@example({"device": ["a", 0.5]}, 5, None)
@example({"device": ["a", True]}, 5, None)
@example({"occupant": ["é", None]}, 5, None)
@example({"occupant": ["\ud800"]}, 5, None)
@example({"seq": (1, 2)}, 5, None)
@example({"seq": [[1]]}, 5, None)
@given(st.dictionaries(KEYS, COLUMN, max_size=5), st.sampled_from([0, 7, -1, 1 << 64]),
       st.sampled_from([None, "agent-h1", ""]))
def test_prepared_is_the_plain_prepare_and_size_check(body, time_ns, actor):
    assert outcome(lambda: window_body.prepared(body, time_ns, actor)) == outcome(lambda: plainly(body, time_ns, actor))
    judged = window_body.judge(body)
    if judged is not None:
        assert judged.bound >= len(dcbor.encode_normalized(judged.normal))


NAMES = st.text(alphabet="abcGPU-0:._", min_size=0, max_size=40)   # long enough to outgrow an item's head
SHARE = st.builds(types_pb2.Share, occupant=st.one_of(NAMES, st.sampled_from(["unallocated", "é"])),
                  uj=st.integers(0, U64), grade=st.sampled_from([0, 1, 2, 3]))
WINDOW = st.builds(agent_pb2.Window, device_id=st.one_of(NAMES, st.just("GPU-é")), seq=st.integers(0, U64),
                   start_ns=st.integers(0, U64), end_ns=st.integers(0, U64), uj=st.one_of(st.none(), st.integers(0, U64)),
                   grade=st.sampled_from([0, 1, 2, 3, 99]), shares=st.lists(SHARE, max_size=3),
                   occupancy_version=st.integers(0, U64), gap_reason=st.sampled_from([0, 1, 4]),
                   lost_windows=st.integers(0, (1 << 32) - 1))


@settings(max_examples=200, deadline=None)
@given(st.lists(WINDOW, max_size=6))
def test_every_batch_from_the_wire_takes_the_column_way(windows):
    """A batch read from protobuf (WireWindows) is judged by its texts alone:
    as the full judgement judges it, and as the plain way prepares it."""
    wire = batch_columns(agent_pb2.WindowBatch(windows=windows))[0]
    assert type(wire) is WireWindows and type(wire.since(1)) is WireWindows
    body = windows_body("host-1", wire)
    judged = window_body.judge(body, wire=True)
    assert judged == window_body.judge(body)
    if judged is None:   # a text that is not ASCII: the plain way sizes it
        assert not all(map(str.isascii, [*wire.device, *wire.occupant]))
    else:
        assert list(judged.normal) == list(window_body.judge(body).normal)
        assert judged.bound >= len(dcbor.encode_normalized(judged.normal))
    assert outcome(lambda: window_body.prepared(body, 5, "agent", wire=True)) == \
        outcome(lambda: plainly(body, 5, "agent"))


def test_the_text_columns_are_those_the_body_declares_text():
    declared = {name for name, kind in Windows.__annotations__.items() if "str" in str(kind)}
    assert TEXT == declared | {"worker"}


def body_of(n: int, occupant: str) -> dict:
    return windows_body("h1", Windows(["GPU-0"] * n, list(range(1, n + 1)), [0] * n, [1] * n, [1] * n,
                                      ["HwShunt"] * n, [1] * n, [occupant] * n, [1] * n, ["HwShunt"] * n))


def test_a_batch_near_the_cap_is_sized_exactly():
    """A body whose bound passes the cap is measured by check_size itself:
    taken when it fits, though its bound does not; refused with check_size's
    words when it does not fit."""
    fits = body_of(1_000, "x" * 8_300)
    assert window_body.judge(fits).bound > dcbor.MAX_BYTES > len(dcbor.encode_normalized(fits))
    assert outcome(lambda: window_body.prepared(fits, 5, None)) == outcome(lambda: plainly(fits, 5, None))
    over = body_of(1_100, "x" * 8_000)
    with pytest.raises(ReceiptTooLarge) as fast:
        window_body.prepared(over, 5, None)
    with pytest.raises(ReceiptTooLarge) as plain:
        plainly(over, 5, None)
    assert str(fast.value) == str(plain.value)
