"""protobuf's wire format, for the answers the service encodes by hand from
bytes it keeps (listing.py: List pages and a Watch's first statuses;
windows/occupancy_wire.py: occupancy pushes): a varint, a field's tag, a
length-delimited field. Every such encoding is tested against the message
protobuf itself serializes."""

from __future__ import annotations

VARINT, LENGTH_DELIMITED = 0, 2   # wire types


def varint(n: int) -> bytes:
    """protobuf's base-128 varint of a non-negative integer."""
    if n < 0x80:
        return bytes((n,))
    if n < 0x4000:
        return bytes((n & 0x7F | 0x80, n >> 7))
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def tag(message, field: str, wire_type: int) -> bytes:
    """The key of `message`'s field named `field`, of `wire_type`."""
    return varint(message.DESCRIPTOR.fields_by_name[field].number << 3 | wire_type)


def delimited(key: bytes, body: bytes) -> bytes:
    """A length-delimited field: its key, the body's length, the body."""
    return key + varint(len(body)) + body
