"""Record decoders written out as straight-line source, one function per
record type: start-up decodes a checkpoint's every claim (10^5 of them, three
records each), and the plain decoder's loop over a body's fields, with a
dict of values and a keyword call per record, was most of that.

The plain twin is codec._record_decoder. A body the written-out decoder does
not take exactly as it is (not a map, a field it does not know or one
missing, a value of another type, an enum name it does not know, anything
raised) is handed to the twin whole, which decodes it or raises its own
error: the two give the same values and the same errors by construction.
tests/kernel/test_codec.py holds them equal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from enum import Enum
from typing import Any

from .records import new_tuple

_MISSING = object()
_SCALARS = (str, bytes, bool, int)


def written_out(cls: type, hints: dict[str, Any], defaults: dict[str, Any], plain: Callable[[Any], Any],
                field_decoder: Callable[[Any], Callable[[Any], Any]]) -> Callable[[Any], Any]:
    """The decoder of record `cls` (fields `hints` in order, `defaults` for
    those that have one), falling back to `plain`; `field_decoder(hint)` is
    the codec's decoder of a field's type (nested records, tuples, options)."""
    names = tuple(hints)
    scope: dict[str, Any] = {"_M": _MISSING, "_names": frozenset(names), "_plain": plain, "_cls": cls,
                             "_new": new_tuple}
    lines = ["def decode(body):",
             "    try:",
             "        if type(body) is dict and _names.issuperset(body):",
             "            get = body.get"]
    for i, name in enumerate(names):
        hint, value = hints[name], f"v{i}"
        lines.append(f"            {value} = get({name!r}, _M)")
        if name in defaults:
            scope[f"_d{i}"] = defaults[name]
            lines.append(f"            if {value} is _M: {value} = _d{i}")
            lines.append("            else:")
        else:
            lines.append(f"            if {value} is _M: raise LookupError")   # required: the twin says so
            lines.append("            if True:")
        lines.append(f"                {_check(hint, value, i, scope, field_decoder)}")
    values = ", ".join(f"v{i}" for i in range(len(names)))
    if dataclasses.is_dataclass(cls):
        lines.append(f"            return _cls({values})")
    else:   # a NamedTuple: its values in field order, without its Python-level __new__
        lines.append(f"            return _new(_cls, ({values},))")
    lines += ["    except Exception:",
              "        pass",
              "    return _plain(body)"]
    exec("\n".join(lines), scope)   # noqa: S102 - source made above from the record's own field names
    return scope["decode"]


def _check(hint: Any, value: str, i: int, scope: dict[str, Any],
           field_decoder: Callable[[Any], Callable[[Any], Any]]) -> str:
    """The statement that checks or decodes one present field's value in place."""
    if hint in _SCALARS:   # exact types, as cbor2 makes them (a bool is not an int)
        scope[f"_t{i}"] = hint
        return f"if type({value}) is not _t{i}: raise TypeError"
    if isinstance(hint, type) and issubclass(hint, Enum):
        scope[f"_e{i}"] = hint._member_map_
        return f"{value} = _e{i}[{value}] if type({value}) is str else _e{i}[None]"
    scope[f"_f{i}"] = field_decoder(hint)
    return f"{value} = _f{i}({value})"
