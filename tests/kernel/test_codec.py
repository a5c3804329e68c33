"""The codec's compiled encoders and decoders (codec.py) against the plain
walk of the type hints they replace, kept here as the reference; and the
record decoders written out as source (fast/decoders.py) against their plain
twin, codec._record_decoder, on good bodies and damaged ones alike."""

from __future__ import annotations

import dataclasses
import types
import typing
from enum import Enum
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import base, drive, operations, trees

from scheduler.kernel import codec
from scheduler.kernel.snapshot import Claim, ClaimSpec, Resources, Tenant, Worker


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


def _outcome(decoder, body: Any) -> Any:
    try:
        return "value", decoder(body)
    except Exception as exc:   # the error a caller would see: its type and its words
        return "error", type(exc), str(exc)


# what a damaged body may hold in place of a field's value, or as a field of its own
odd_values = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.text(max_size=3), st.binary(max_size=2),
                       st.sampled_from(["ADMITTED", "PENDING", "Estimator", "HwShunt", "SIDEWAYS"]),
                       st.lists(st.integers(0, 2), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(),
                                                                                 max_size=2))


def _damaged(body: dict, damage: list, path: tuple = ()) -> dict:
    """`body` with each (depth, pick, value, remove) applied to a field of the
    record it reaches: replaced by the value, removed, or a new field added."""
    body = dict(body)
    for depth, pick, value, remove in damage:
        target, names = body, sorted(body)
        for _ in range(depth):   # into a nested record, where there is one
            nested = [n for n in names if isinstance(target[n], dict) and not isinstance(target[n], bool)]
            if not nested:
                break
            name = nested[pick % len(nested)]
            target[name] = dict(target[name])
            target, names = target[name], sorted(target[name])
        if not names or pick % 7 == 6:
            target[f"extra{pick}"] = value
        elif remove:
            del target[names[pick % len(names)]]
        else:
            target[names[pick % len(names)]] = value
    return body


@given(trees(), operations, st.lists(st.tuples(st.integers(0, 2), st.integers(0, 50), odd_values, st.booleans()),
                                     max_size=3))
def test_the_written_out_decoders_give_their_plain_twins_values_and_errors(tenants, ops, damage):
    run = drive(base(tenants), ops)
    state = run.states[-1]
    records = [*state.claims.values(), *state.workers.values()]
    for value in records:
        cls = type(value)
        for body in (codec.encode(value), codec.encode_compact(value)):
            body = _damaged(body, damage)
            fast, plain = codec._decoder(cls), codec._record_decoder(cls)
            assert fast is not plain
            got = _outcome(fast, body)
            assert got == _outcome(plain, body) == _outcome(lambda b: reference_decode(cls, b), body)
            if not damage:
                assert got == ("value", value)


@pytest.mark.parametrize("cls", [Claim, ClaimSpec, Resources, Worker, Tenant])
def test_a_body_that_is_not_a_map_is_refused_by_the_written_out_decoder_as_by_its_twin(cls):
    for body in (None, [], "x", 3, True):
        assert _outcome(codec._decoder(cls), body) == _outcome(codec._record_decoder(cls), body)
