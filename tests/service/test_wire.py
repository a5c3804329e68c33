"""The hand-written protobuf wire format (service/wire.py) against protobuf's own."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protos.pool.v1 import claims_pb2
from scheduler.service.wire import LENGTH_DELIMITED, VARINT, delimited, tag, varint


@given(st.integers(1, 2**64 - 1))
def test_a_varint_field_is_what_protobuf_serializes(n):
    assert tag(claims_pb2.ClaimEvent, "time_ns", VARINT) + varint(n) == \
        claims_pb2.ClaimEvent(time_ns=n).SerializeToString()


@given(st.text(min_size=1, max_size=300))
def test_a_length_delimited_field_is_what_protobuf_serializes(claim_id):
    status = claims_pb2.ClaimStatus(claim_id=claim_id)
    assert delimited(tag(claims_pb2.ClaimEvent, "status", LENGTH_DELIMITED), status.SerializeToString()) == \
        claims_pb2.ClaimEvent(status=status).SerializeToString()
