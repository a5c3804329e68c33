"""Dataclass records <-> CBOR-friendly bodies: text keys, ints, str, bytes,
bool, None, lists and dicts only. Enums travel by name, tuples as lists,
nested records as dicts. Driven by the type hints, so a record needs no
hand-written codec and the round trip is exact."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from enum import Enum
from typing import Any

_SCALARS = (bool, int, str, bytes)


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
    if isinstance(value, Enum):
        return value.name
    if _is_record(type(value)):
        return {name: encode(getattr(value, name)) for name in _hints(type(value))}
    if isinstance(value, tuple):
        return [encode(v) for v in value]
    if value is None or isinstance(value, _SCALARS):
        return value
    raise TypeError(f"cannot encode {type(value).__name__} in a body")


def decode(hint: Any, body: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return None if body is None else decode(options[0], body)
    if origin is tuple:
        (item, _ellipsis) = typing.get_args(hint)
        return tuple(decode(item, v) for v in _expect(body, list))
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint[_expect(body, str)]
    if _is_record(hint):
        return from_body(hint, body)
    if hint is int:
        if isinstance(body, bool) or not isinstance(body, int):
            raise ValueError(f"expected an integer, got {body!r}")
        return body
    return _expect(body, hint)


def _expect(body: Any, kind: type) -> Any:
    if not isinstance(body, kind) or (kind is not bool and isinstance(body, bool)):
        raise ValueError(f"expected {kind.__name__}, got {body!r}")
    return body


def from_body(cls: type, body: Any) -> Any:
    fields = _hints(cls)
    body = _expect(body, dict)
    unknown = set(body) - set(fields)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown fields {sorted(unknown)}")
    return cls(**{name: decode(hint, body[name]) for name, hint in fields.items() if name in body})
