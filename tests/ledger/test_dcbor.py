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


def plain_normalize(value, depth=0):
    """The reference dcbor.normalize is held to: the plain recursive walk."""
    kind = type(value)
    if kind in (str, bytes, bool) or value is None:
        return value
    if kind is int:
        if not -(1 << 64) <= value < 1 << 64:
            raise DcborError("unencodable", "integer outside the CBOR range")
        return value
    if depth >= dcbor.MAX_DEPTH:
        raise DcborError("unencodable", "too deep")
    if kind is dict:
        if not all(type(key) is str for key in value):
            raise DcborError("unencodable", "a map key is not a text string")
        order = sorted(value, key=lambda key: (len(key.encode()), key.encode()))
        return {key: plain_normalize(value[key], depth + 1) for key in order}
    if kind in (list, tuple):
        return [plain_normalize(item, depth + 1) for item in value]
    raise DcborError("unencodable", f"{kind.__name__} is not in the subset")


wild = (st.integers(-(1 << 65), 1 << 65) | st.text(max_size=4) | st.binary(max_size=4) | st.booleans() | st.none()
        | st.floats(allow_nan=False) | st.just(1 << 64))
nested = st.recursive(wild, lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
                      | st.dictionaries(st.text(max_size=3) | st.integers(0, 2), inner, max_size=4)
                      | st.builds(lambda items: dict(reversed(list(items.items()))),
                                  st.dictionaries(st.text(max_size=3), inner, max_size=4))
                      | st.dictionaries(st.text(max_size=3), st.integers(), min_size=15, max_size=20),  # past the cache's
                      max_leaves=25)


def outcome(normalize, value):
    try:
        result = normalize(value)
    except DcborError as error:
        return "refused", error.reason
    return "ok", result, repr(result)   # repr: key order and list-vs-tuple count, not only equality


@given(nested, st.integers(dcbor.MAX_DEPTH - 3, dcbor.MAX_DEPTH))
def test_normalize_is_the_plain_walk(value, depth):
    """Key orders are cached and scalars in maps and arrays taken inline: the
    same result (keys in the same order, tuples as lists) and the same refusals,
    the cache cold and warm, near the depth cap too."""
    for _ in range(2):
        assert outcome(dcbor.normalize, value) == outcome(plain_normalize, value)
    wrapped = value
    for _ in range(depth):
        wrapped = [wrapped]
    assert outcome(dcbor.normalize, wrapped)[0] == outcome(plain_normalize, wrapped)[0]


@given(st.lists(st.text(max_size=30), max_size=60, unique=True))
def test_key_place_sorts_as_key_order(keys):
    """dcbor.key_place, one byte string per key (service/encoded.py sorts by
    it), orders text keys exactly as key_order, the canonical map order."""
    assert sorted(keys, key=dcbor.key_place) == sorted(keys, key=dcbor.key_order)
