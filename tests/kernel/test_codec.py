"""The codec's compiled encoders and decoders (codec.py) against the plain
walk of the type hints they replace, kept here as the reference."""

from __future__ import annotations

import dataclasses
import types
import typing
from enum import Enum
from typing import Any

import pytest
from hypothesis import given
from strategies import base, drive, operations, trees

from scheduler.kernel import codec
from scheduler.kernel.snapshot import Claim, ClaimSpec, Resources, Tenant


def reference_encode(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.name
    if codec._is_record(type(value)):
        return {name: reference_encode(getattr(value, name)) for name in codec._hints(type(value))}
    if isinstance(value, tuple):
        return [reference_encode(v) for v in value]
    if value is None or isinstance(value, codec._SCALARS):
        return value
    raise TypeError(f"cannot encode {type(value).__name__} in a body")


def reference_decode(hint: Any, body: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return None if body is None else reference_decode(options[0], body)
    if origin is tuple:
        return tuple(reference_decode(typing.get_args(hint)[0], v) for v in codec._expect(body, list))
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint[codec._expect(body, str)]
    if codec._is_record(hint):
        fields = codec._hints(hint)
        body = codec._expect(body, dict)
        if set(body) - set(fields):
            raise ValueError(f"{hint.__name__}: unknown fields {sorted(set(body) - set(fields))}")
        return hint(**{name: reference_decode(h, body[name]) for name, h in fields.items() if name in body})
    if hint is int:
        if isinstance(body, bool) or not isinstance(body, int):
            raise ValueError(f"expected an integer, got {body!r}")
        return body
    return codec._expect(body, hint)


@given(trees(), operations)
def test_claims_and_events_encode_and_decode_as_the_reference_does(tenants, ops):
    run = drive(base(tenants), ops)
    values = [*run.events, *(c for s in run.states[-1:] for c in s.claims.values())]
    for value in values:
        body = codec.encode(value)
        assert body == reference_encode(value)
        assert codec.decode(type(value), body) == reference_decode(type(value), body) == value
        compact = codec.encode_compact(value)
        assert codec.decode(type(value), compact) == value, "the fields left out decode as their defaults"


@pytest.mark.parametrize("hint, body", [
    (Resources, {"cpu_millis": True}),                      # a bool is not an integer
    (Resources, {"cpu_millis": 1, "nope": 2}),              # an unknown field
    (ClaimSpec, {"claim_id": "c", "tenant": "t", "placement": "SIDEWAYS"}),   # an unknown enum name
    (Claim, {"spec": {"claim_id": "c", "tenant": "t"}, "seq": "1"}),
    (tuple[Tenant, ...], {"name": "root"}),
    (int | None, "7"),
])
def test_bad_bodies_are_refused_as_the_reference_refuses_them(hint, body):
    with pytest.raises(Exception) as expected:
        reference_decode(hint, body)
    with pytest.raises(type(expected.value)) as got:
        codec.decode(hint, body)
    assert str(got.value) == str(expected.value)


def test_a_value_outside_the_records_is_refused():
    @dataclasses.dataclass
    class Holder:
        value: object

    with pytest.raises(TypeError, match="cannot encode float in a body"):
        codec.encode(Holder(1.5))
