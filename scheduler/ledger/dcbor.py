"""Deterministic CBOR (RFC 8949 §4.2.1) for receipt cores, restricted to one subset:
integers (−2⁶⁴ … 2⁶⁴−1), text, byte strings, arrays, maps with text-string keys,
true, false and null. No floats, tags, other simple values or indefinite lengths.

With text keys only, RFC 8949's bytewise order of encoded keys is "shorter UTF-8
first, then bytewise", which is also RFC 7049's canonical order — so `encode` sorts
keys that way itself and lets cbor2 write the already-ordered value.

`decode` is strict: it accepts exactly the bytes that are the canonical encoding
of a value in the subset (decoded, normalized, re-encoded, compared). Anything
else goes to a parser that knows only the subset and says why: reason `decode`
(outside the subset, malformed, too deep or too large) or `non_canonical` (a
non-shortest argument, unsorted keys). One value has one encoding, so two
encodings can never share one signature.
"""

from __future__ import annotations

import io
import threading
from typing import Any

import cbor2

MAX_BYTES = 8 << 20      # a core larger than this is refused either way
MAX_DEPTH = 32           # arrays/maps nested deeper than this are refused
_INT_MIN, _INT_LIMIT = -(1 << 64), 1 << 64
_local = threading.local()


class DcborError(ValueError):
    """A value or byte string outside the subset. `reason` is `decode`,
    `non_canonical`, or `unencodable` (refused on the way in)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _key_order(key: str) -> tuple[int, str]:
    # Python orders str by code point, which is UTF-8's bytewise order.
    return (len(key) if key.isascii() else len(key.encode())), key


# A record's keys as given -> the same keys in canonical order, checked to be text:
# receipt bodies are made of a few kinds of record, each normalized thousands of
# times a second (twice per admission on the way in, once per receipt at replay),
# so each key order is sorted once. Only maps of a record's size are remembered (a
# map keyed by ids is sorted each time), and at most _MAX_ORDERS of them: emptied
# when full. tests/ledger/test_dcbor.py holds normalize to the plain walk it replaces.
_ORDERS: dict[tuple, tuple[str, ...]] = {}
_MAX_ORDERS, _RECORD_KEYS = 1024, 16


def _order(value: dict) -> tuple[str, ...] | list[str]:
    keys = tuple(value) if len(value) <= _RECORD_KEYS else None
    order = _ORDERS.get(keys) if keys is not None else None
    if order is None:
        if not all(type(key) is str for key in value):
            raise DcborError("unencodable", "a map key is not a text string")
        order = sorted(value, key=_key_order)
        if keys is not None:
            if len(_ORDERS) >= _MAX_ORDERS:
                _ORDERS.clear()
            _ORDERS[keys] = order = tuple(order)
    return order


class Raw:
    """Bytes that are already one det-CBOR item (made by `encode`, or by `array`
    from such items), written as they are wherever they stand in a value:
    `normalize` keeps them and `encode` splices them in, so a large value whose
    parts are unchanged (a checkpoint's claims) is not encoded again. Only this
    module's own encodings belong in one; `decode` never returns one."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def array(items: list[bytes], count: int | None = None) -> Raw:
    """The det-CBOR array of items each already encoded (an array's encoding
    is its head, then its items' encodings); with `count`, `items` are that
    many items' encodings in pieces of any size, joined in order."""
    return Raw(b"".join([_head(4, len(items) if count is None else count), *items]))


def mapping(count: int, pairs: bytes | list[bytes]) -> Raw:
    """The det-CBOR map of `count` entries whose keys' and values' encodings,
    key then value, are `pairs` (or those pieces joined), already in key
    order (`key_order`)."""
    return Raw(b"".join([_head(5, count), pairs] if isinstance(pairs, bytes) else [_head(5, count), *pairs]))


key_order = _key_order   # a text key's place in a map's canonical order


def key_place(key: str) -> bytes:
    """`key_order` as one byte string (the UTF-8 length, then the UTF-8),
    which sorts as key_order does and as fast as bytes compare: for keeping
    many keys in order (service/encoded.py; tests/ledger/test_dcbor.py)."""
    data = key.encode()
    return len(data).to_bytes(4, "big") + data


def _head(major: int, n: int) -> bytes:
    """The shortest head of major type `major` with argument n (RFC 8949 §3)."""
    top = major << 5
    if n < 24:
        return bytes((top | n,))
    for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * size):
            return bytes((top | info,)) + n.to_bytes(size, "big")
    raise DcborError("unencodable", f"{n} items is beyond CBOR's range")


def _splice(encoder: cbor2.CBOREncoder, value: Any) -> None:
    if type(value) is not Raw:
        raise DcborError("unencodable", f"{type(value).__name__} is not in the det-CBOR subset")
    encoder.write(value.data)


def normalize(value: Any, depth: int = 0) -> Any:
    """The value as `decode` would return it (tuples become lists, map keys in
    canonical order), or DcborError(`unencodable`). Scalars inside a map or an
    array are taken without a call of their own."""
    kind = type(value)
    if kind is str or kind is bytes or value is None or kind is bool:
        return value
    if kind is int:
        if not _INT_MIN <= value < _INT_LIMIT:
            raise DcborError("unencodable", f"integer {value} is outside the CBOR range")
        return value
    if depth >= MAX_DEPTH:
        raise DcborError("unencodable", f"nested deeper than {MAX_DEPTH}")
    if kind is dict:
        out = {}
        for key in _order(value):
            item = value[key]
            kind = type(item)
            out[key] = item if kind is str or (kind is int and _INT_MIN <= item < _INT_LIMIT) or kind is bytes \
                or item is None or kind is bool else normalize(item, depth + 1)
        return out
    if kind is list or kind is tuple:
        return [item if (kind := type(item)) is str or (kind is int and _INT_MIN <= item < _INT_LIMIT)
                or kind is bytes or item is None or kind is bool else normalize(item, depth + 1) for item in value]
    if kind is Raw:
        return value
    raise DcborError("unencodable", f"{kind.__name__} is not in the det-CBOR subset")


def _encoder() -> cbor2.CBOREncoder:
    # Building an encoder costs more than encoding a core, so each thread keeps one.
    try:
        return _local.encoder
    except AttributeError:
        _local.encoder = cbor2.CBOREncoder(io.BytesIO(), default=_splice)
        return _local.encoder


def encode(value: Any, limit: int | None = MAX_BYTES) -> bytes:
    """`limit`: the most bytes allowed (None: no limit, for a checkpoint's
    state, which is carried in chunks; every core keeps the cap)."""
    return encode_normalized(normalize(value), limit)


def encode_normalized(value: Any, limit: int | None = MAX_BYTES) -> bytes:
    """Encode a value already in `normalize`'s form (the caller built it so)."""
    data = _encoder().encode_to_bytes(value)
    if limit is not None and len(data) > limit:
        raise DcborError("unencodable", f"encoding is {len(data)} bytes, over {limit}")
    return data


def decode(data: bytes, limit: int | None = MAX_BYTES) -> Any:
    if limit is not None and len(data) > limit:
        raise DcborError("decode", f"{len(data)} bytes, over {limit}")
    # Fast path: cbor2's C parser. Bytes equal to the canonical encoding of a value
    # in the subset are det-CBOR by definition, so this accepts nothing more.
    try:
        value = normalize(cbor2.loads(data))
        if encode_normalized(value, None) == data:
            return value
    except Exception:   # whatever cbor2 makes of hostile bytes, the strict parser says why
        pass
    return _strict_decode(data)


def decode_authenticated(data: bytes) -> Any:
    """Bytes whose integrity is already proven by a signed digest (a
    checkpoint's chunks): parsed by cbor2 alone, without the canonical check
    (`decode` spends most of its time on it, and a signature already commits
    to these exact bytes); DcborError if they do not parse. The caller's
    decoder checks the types it reads."""
    try:
        return cbor2.loads(data)
    except Exception as exc:   # whatever cbor2 makes of broken bytes
        raise DcborError("decode", f"not CBOR: {exc}") from None


def _strict_decode(data: bytes) -> Any:
    value, end = _Parser(data).item(0, 0)
    if end != len(data):
        raise DcborError("decode", f"{len(data) - end} bytes after the item")
    # The parser already refused unsorted keys; re-encoding catches the rest
    # (non-shortest arguments).
    if encode_normalized(value, None) != data:
        raise DcborError("non_canonical", "does not re-encode to the same bytes")
    return value


class _Parser:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)

    def long_head(self, pos: int, initial: int) -> tuple[int, int, int]:
        """(major type, argument, position after the head) for a head longer than a byte."""
        info = initial & 31
        if info > 27:
            what = "indefinite length" if info == 31 else "reserved additional information"
            raise DcborError("decode", f"{what} at byte {pos}")
        end = pos + 1 + (1 << (info - 24))
        if end > self.size:
            raise DcborError("decode", "truncated")
        return initial >> 5, int.from_bytes(self.data[pos + 1:end], "big"), end

    def item(self, pos: int, depth: int) -> tuple[Any, int]:
        if pos >= self.size:
            raise DcborError("decode", "truncated")
        initial = self.data[pos]
        if initial & 31 < 24:
            major, arg, end = initial >> 5, initial & 31, pos + 1
        else:
            major, arg, end = self.long_head(pos, initial)
        if major == 0:
            return arg, end
        if major == 3 or major == 2:
            stop = end + arg
            if stop > self.size:
                raise DcborError("decode", "truncated")
            if major == 2:
                return self.data[end:stop], stop
            try:
                return self.data[end:stop].decode(), stop
            except UnicodeDecodeError:
                raise DcborError("decode", f"invalid UTF-8 at byte {pos}") from None
        if major == 1:
            return -1 - arg, end
        if major == 7:
            if 20 <= arg <= 22 and end == pos + 1:
                return (False, True, None)[arg - 20], end
            raise DcborError("decode", f"float or simple value at byte {pos}")
        if major == 6:
            raise DcborError("decode", f"tag at byte {pos}")
        if depth >= MAX_DEPTH:
            raise DcborError("decode", f"nested deeper than {MAX_DEPTH}")
        return (self.array if major == 4 else self.map)(arg, end, depth + 1)

    def array(self, count: int, pos: int, depth: int) -> tuple[list, int]:
        items = []
        for _ in range(count):
            value, pos = self.item(pos, depth)
            items.append(value)
        return items, pos

    def map(self, count: int, pos: int, depth: int) -> tuple[dict, int]:
        result: dict[str, Any] = {}
        previous = (-1, "")
        for _ in range(count):
            if pos < self.size and self.data[pos] >> 5 != 3:
                raise DcborError("decode", f"map key at byte {pos} is not a text string")
            key, pos = self.item(pos, depth)
            order = _key_order(key)
            if order <= previous:
                reason = "decode" if key in result else "non_canonical"
                raise DcborError(reason, f"map key {key!r} is duplicated or out of order")
            previous = order
            result[key], pos = self.item(pos, depth)
        return result, pos
