"""The det-CBOR subset: round trip, canonical bytes, and strictness."""

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.ledger import dcbor
from scheduler.ledger.dcbor import DcborError

scalars = (st.integers(-(1 << 64), (1 << 64) - 1) | st.text(max_size=12) | st.binary(max_size=12)
           | st.booleans() | st.none())
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=20)


@given(values)
def test_round_trip_and_rfc8949_order(value):
    data = dcbor.encode(value)
    assert dcbor.decode(data) == value
    assert data == cbor2.dumps(value, canonical=True)


@given(st.dictionaries(st.text(max_size=6), st.integers(0, 9), min_size=2, max_size=6))
def test_keys_sorted_bytewise_by_encoding(mapping):
    data = dcbor.encode(mapping)
    keys = list(dcbor.decode(data))
    assert keys == sorted(keys, key=lambda k: cbor2.dumps(k))


@given(st.binary(max_size=40))
def test_anything_accepted_is_its_own_canonical_encoding(data):
    try:
        value = dcbor.decode(data)
    except DcborError as exc:
        assert exc.reason in ("decode", "non_canonical")
    else:
        assert dcbor.encode(value) == data


@given(values, st.data())
def test_a_reordered_map_is_non_canonical(value, data):
    mapping = {"a": 1, "bb": 2, "c": value}
    order = data.draw(st.permutations(list(mapping)))
    shuffled = cbor2.dumps({k: mapping[k] for k in order})  # insertion order, not canonical
    if shuffled == dcbor.encode(mapping):
        assert dcbor.decode(shuffled) == mapping
    else:
        with pytest.raises(DcborError) as err:
            dcbor.decode(shuffled)
        assert err.value.reason == "non_canonical"


@pytest.mark.parametrize("data, reason", [
    (b"\xf9\x3c\x00", "decode"),                   # half float
    (b"\xfb" + bytes(8), "decode"),                # double
    (b"\xc1\x00", "decode"),                       # tag 1
    (b"\xc2\x41\x01", "decode"),                   # bignum tag
    (b"\x9f\x01\xff", "decode"),                   # indefinite array
    (b"\x7f\x61a\xff", "decode"),                  # indefinite text
    (b"\xa1\x01\x02", "decode"),                   # integer key
    (b"\xa1\x41a\x02", "decode"),                  # byte-string key
    (b"\xa2\x61a\x01\x61a\x02", "decode"),         # duplicate key
    (b"\xf7", "decode"),                           # undefined
    (b"\xf8\x20", "decode"),                       # simple(32)
    (b"\x62\xff\xfe", "decode"),                   # invalid UTF-8
    (b"\x01\x02", "decode"),                       # trailing bytes
    (b"\x5a\xff\xff\xff\xff", "decode"),           # truncated
    (b"", "decode"),
    (b"\x18\x05", "non_canonical"),                # 5 in two bytes
    (b"\x59\x00\x01a", "non_canonical"),           # one-byte string, long length
    (b"\xa2\x62bb\x01\x61a\x02", "non_canonical"),  # longer key first
    (b"\xa2\x61b\x01\x61a\x02", "non_canonical"),   # "b" before "a"
])
def test_refusals(data, reason):
    with pytest.raises(DcborError) as err:
        dcbor.decode(data)
    assert err.value.reason == reason


def test_depth_and_size_caps():
    deep = b"\x81" * (dcbor.MAX_DEPTH + 1) + b"\x00"
    with pytest.raises(DcborError, match="nested"):
        dcbor.decode(deep)
    assert dcbor.decode(deep[1:]) is not None
    with pytest.raises(DcborError, match="over"):
        dcbor.decode(b"\x00" * (dcbor.MAX_BYTES + 1))


def _nested(depth):
    return [] if depth == 1 else [_nested(depth - 1)]


@pytest.mark.parametrize("value", [1.5, {1: 2}, {b"k": 1}, {"s": {1, 2}}, 1 << 64, -(1 << 64) - 1,
                                   bytearray(b"x"), _nested(dcbor.MAX_DEPTH + 1)])
def test_unencodable(value):
    with pytest.raises(DcborError) as err:
        dcbor.encode(value)
    assert err.value.reason == "unencodable"


def test_tuples_and_unsorted_dicts_normalize():
    assert dcbor.decode(dcbor.encode({"zz": (1, 2), "a": {"y": 1, "x": 2}})) == \
        {"a": {"x": 2, "y": 1}, "zz": [1, 2]}
