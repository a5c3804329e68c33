"""A `windows` receipt's body made ready for the ledger from its columns,
without walking every value.

The ledger takes a body in det-CBOR's normal form (dcbor.normalize: lists,
map keys in canonical order, integers in CBOR's range, only the subset's
types) and no larger than a receipt may be (receipts.check_size). Done value
by value, that is a Python call per window field: most of what a batch of
1,000 windows cost the event loop before it reached the ledger. A batch is
a dozen flat columns, so both are judged a column at a time here:

- normal form: each column a list whose items are all `int`, `str` or None
  (one `set(map(type, ...))` each), its integers within range (`min`,
  `max`), and the keys put in canonical order once; anything else goes to
  dcbor.normalize itself, which refuses what it must;
- size: an upper bound on the encoding from the columns' lengths (every
  text ASCII, so a character is a byte), far below the cap for any batch an
  agent may send; a batch near or over it, or with any other text, is sized
  by check_size itself.

Both are speed tricks beside the plain functions they stand for, and
tests/service/test_window_body.py checks that `prepared` gives what
steward.prepare and receipts.check_size give, on random and hostile
columns.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

from scheduler.ledger import dcbor
from scheduler.ledger.receipts import check_size
from scheduler.ledger.steward import Prepared, prepare
from scheduler.service.windows.batch import TEXT, WINDOWS

_INT_MIN, _INT_LIMIT = -(1 << 64), 1 << 64   # CBOR's integers (dcbor)
_PLAIN = frozenset({int, str, type(None)})   # items dcbor.normalize returns as they are
# a receipt's core around its body (seq, kind, prev, profile, time, actor, their keys): far more than it takes
_CORE_MARGIN = 64 << 10
_HEAD = 9                                    # the longest head of a CBOR item (type and length or value)


def prepared(body: dict[str, Any], time_ns: int, actor: str | None, wire: bool = False) -> Prepared:
    """steward.prepare(WINDOWS, body, …) and receipts.check_size on it, for a
    body made by observed.windows_body (`wire`: of observed.WireWindows):
    the same Prepared, the same errors."""
    judged = judge(body, wire)
    if judged is None:
        item = prepare(WINDOWS, body, time_ns, actor=actor)   # the plain way: value by value
    else:
        item = prepare(WINDOWS, {}, time_ns, actor=actor)._replace(body=judged.normal)   # prepare's own checks
    if judged is None or judged.bound + _CORE_MARGIN > dcbor.MAX_BYTES:
        check_size(item.kind, item.body)
    return item


class Judged(NamedTuple):
    normal: dict[str, Any]   # the body in normal form: its columns as they are, its keys in canonical order
    bound: int               # at least the length of its encoding


def judge(body: dict[str, Any], wire: bool = False) -> Judged | None:
    """The body in normal form and a bound on its encoding's length, if every
    value is a text or a flat list of plain items in range and every text is
    ASCII (a character a byte); else None (the plain way decides). `wire`:
    the body of observed.WireWindows, whose items are known to be plain and
    in range (protobuf's types), so only its texts are looked at."""
    bound = _HEAD
    for key, value in body.items():
        bound += 2 * _HEAD + len(key)
        if type(value) is str:
            if not value.isascii():
                return None
            bound += len(value)
            continue
        if type(value) is not list:
            return None
        if wire:
            bound += _HEAD * len(value)
            if key in TEXT:
                texts = list(filter(None, value))
                if not all(map(str.isascii, texts)):
                    return None
                bound += sum(map(len, texts))
            continue
        kinds = set(map(type, value))
        if not kinds <= _PLAIN:
            return None
        bound += _HEAD * len(value)
        if int in kinds:
            ints = value if len(kinds) == 1 else [v for v in value if type(v) is int]
            if min(ints) < _INT_MIN or max(ints) >= _INT_LIMIT:
                return None
        if str in kinds:
            texts = value if len(kinds) == 1 else list(filter(None, value)) if int not in kinds else \
                [v for v in value if type(v) is str]
            if not all(map(str.isascii, texts)):
                return None
            bound += sum(map(len, texts))
    if not all(map(str.isascii, body)):
        return None
    return Judged({key: body[key] for key in _canonical(tuple(body))}, bound)


@lru_cache(maxsize=16)
def _canonical(keys: tuple[str, ...]) -> list[str]:
    """dcbor's canonical order of these keys (from dcbor.normalize itself)."""
    return list(dcbor.normalize(dict.fromkeys(keys)))
