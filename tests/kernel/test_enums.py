"""The kernel's closed vocabularies (reasons.py) carry the names and values
of the wire's enums (types.proto, ops.proto), so the service converts by
name (`pb.Reason.Value(r.name)`): each kernel enum equals its wire twin
member for member, and ErrorCode is a subset of the wire's, value for value."""

from __future__ import annotations

import pytest

from protos.pool.v1 import ops_pb2, types_pb2
from scheduler.kernel import reasons

WHOLE = [(reasons.Reason, types_pb2.Reason), (reasons.IdleVerdict, types_pb2.IdleVerdict),
         (reasons.ClaimState, types_pb2.ClaimState), (reasons.Placement, types_pb2.Placement),
         (reasons.CheckStep, ops_pb2.CheckStep), (reasons.Tier, ops_pb2.Tier)]


@pytest.mark.parametrize("kernel, wire", WHOLE, ids=[k.__name__ for k, _ in WHOLE])
def test_a_kernel_enum_is_its_wire_enum(kernel, wire):
    assert {m.name: int(m) for m in kernel} == dict(wire.items())


def test_the_kernel_error_codes_are_wire_codes_with_the_same_values():
    wire = dict(types_pb2.ErrorCode.items())
    assert {c.name: int(c) for c in reasons.ErrorCode}.items() <= wire.items()
