"""Dataclass records <-> CBOR-friendly bodies: text keys, ints, str, bytes,
bool, None, lists and dicts only. Enums travel by name, tuples as lists,
nested records as dicts. Driven by the type hints, so a record needs no
hand-written codec and the round trip is exact."""

from __future__ import annotations

import dataclasses
import functools
import operator
import types
import typing
from collections.abc import Callable
from enum import Enum
from typing import Any

from .fast.decoders import written_out

_SCALARS = (bool, int, str, bytes)


_NO_DEFAULT = object()


def _defaults(cls: type) -> dict[str, Any]:
    if hasattr(cls, "_field_defaults"):
        return dict(cls._field_defaults)
    return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}


def _is_record(cls: Any) -> bool:
    """A dataclass or a NamedTuple: fields by name, encoded as a map."""
    return dataclasses.is_dataclass(cls) or (isinstance(cls, type) and issubclass(cls, tuple)
                                             and hasattr(cls, "_fields"))


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    names = cls._fields if hasattr(cls, "_fields") else [f.name for f in dataclasses.fields(cls)]
    hints = typing.get_type_hints(cls)
    return {name: hints[name] for name in names}


def encode(value: Any) -> Any:
    return _encoder(type(value))(value)


def encode_compact(value: Any) -> Any:
    """As `encode`, leaving out every record field equal to its default, which
    decoding puts back: a checkpoint's claims are mostly defaults (half the
    bytes, and half the fields to decode, at 10^5 claims)."""
    return _encoder(type(value), True)(value)


def decode(hint: Any, body: Any) -> Any:
    return _decoder(hint)(body)


# The two are compiled once per type from its hints into a closure per field,
# so a value costs its fields' calls rather than a walk of its type hints
# (a checkpoint decodes every claim); a record's decoder is further written
# out as source (fast/decoders.py), with the closure as its twin and fallback.
# tests/kernel/test_codec.py checks them against the walk they replace, kept
# there as the reference, and the written-out decoders against their twins.

def _identity(value: Any) -> Any:
    return value


@functools.cache
def _encoder(cls: type, compact: bool = False) -> Callable[[Any], Any]:
    inner = encode_compact if compact else encode
    if issubclass(cls, Enum):
        return operator.attrgetter("name")
    if _is_record(cls):
        names = tuple(_hints(cls))
        if compact:
            defaults = _defaults(cls)
            return lambda value: {name: inner(v) for name in names
                                  if (v := getattr(value, name)) is not defaults.get(name, _NO_DEFAULT)
                                  and v != defaults.get(name, _NO_DEFAULT)}
        return lambda value: {name: encode(getattr(value, name)) for name in names}
    if issubclass(cls, tuple):
        return lambda value: [inner(v) for v in value]
    if cls is type(None) or issubclass(cls, _SCALARS):
        return _identity

    def refuse(value: Any) -> Any:
        raise TypeError(f"cannot encode {cls.__name__} in a body")
    return refuse


@functools.cache
def _decoder(hint: Any) -> Callable[[Any], Any]:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        option = _decoder([a for a in typing.get_args(hint) if a is not type(None)][0])
        return lambda body: None if body is None else option(body)
    if origin is tuple:
        item = _decoder(typing.get_args(hint)[0])
        return lambda body: tuple(map(item, _expect(body, list)))
    if isinstance(hint, type) and issubclass(hint, Enum):
        members = hint._member_map_   # what hint[name] looks up, without EnumType.__getitem__'s call

        def member(body: Any) -> Any:
            if type(body) is not str:
                body = _expect(body, str)
            return members[body]
        return member
    if _is_record(hint):   # written out as source (fast/decoders.py), this plain one its fallback and twin
        return written_out(hint, _hints(hint), _defaults(hint), _record_decoder(hint), _decoder)
    if hint is int:
        return _integer
    return lambda body: _expect(body, hint)


def _integer(body: Any) -> int:
    if isinstance(body, bool) or not isinstance(body, int):
        raise ValueError(f"expected an integer, got {body!r}")
    return body


def _record_decoder(cls: type) -> Callable[[Any], Any]:
    """The plain decoder of a record: the fallback and twin of the written-out
    one (fast/decoders.py). Unknown fields first, then each field in order."""
    fields = tuple((name, _decoder(hint)) for name, hint in _hints(cls).items())
    names = frozenset(name for name, _ in fields)

    def record(body: Any) -> Any:
        body = _expect(body, dict)
        if not names.issuperset(body):
            raise ValueError(f"{cls.__name__}: unknown fields {sorted(set(body) - names)}")
        return cls(**{name: field(body[name]) for name, field in fields if name in body})
    return record


def _expect(body: Any, kind: type) -> Any:
    if not isinstance(body, kind) or (kind is not bool and isinstance(body, bool)):
        raise ValueError(f"expected {kind.__name__}, got {body!r}")
    return body


def from_body(cls: type, body: Any) -> Any:
    return _decoder(cls)(body)
