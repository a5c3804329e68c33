"""The shapes of the scheduler's own receipt bodies, for verify (`bodies=check`):
each kind is judged by the decoder replay uses, so the check and the fold
cannot disagree — kernel events by `event_from_body`, a checkpoint's state by
`Engine.restore`, and `windows` column by column (docs/LEDGER.md, "The
scheduler's receipt kinds"). A kind the scheduler never writes is not judged
here: the ledger format is open to other writers.
"""

from __future__ import annotations

import functools
from typing import Any

from scheduler.kernel import event_from_body
from scheduler.kernel.events import EVENT_TYPES
from scheduler.ledger.receipts import CHECKPOINT
from scheduler.service.engine import Engine
from scheduler.service.observed import GRADES, WINDOWS, Windows

_PER_WINDOW = {"device": str, "seq": int, "start_ns": int, "end_ns": int, "uj": (int, None), "grade": GRADES,
               "shares": int}
_PER_SHARE = {"occupant": str, "share_uj": int, "share_grade": GRADES}
assert tuple(_PER_WINDOW) + tuple(_PER_SHARE) == Windows._fields


def check(kind: str, body: dict[str, Any]) -> str | None:
    """None when the body is what the scheduler writes for `kind`, else why not."""
    try:
        if kind in EVENT_TYPES:
            event_from_body(kind, body)
        elif kind == WINDOWS:
            return _windows(body)
        elif kind == CHECKPOINT and "state" in body:   # the first format; chunked states: see verify
            return _checkpoint_state(body["state"])
    except Exception as exc:   # whatever a decoder makes of a wrong body, it is the reason
        return f"{type(exc).__name__}: {exc}"
    return None


@functools.cache
def _checkpoint_fields() -> frozenset[str]:
    return frozenset(Engine(0).snapshot())


def _checkpoint_state(state: Any) -> str | None:
    if type(state) is not dict or set(state) != _checkpoint_fields():
        return f"state is not a map of {sorted(_checkpoint_fields())}"
    Engine(0).restore(state)
    return None


def _fits(value: Any, shape: Any) -> bool:
    if shape is int:
        return type(value) is int and value >= 0
    if shape is str:
        return type(value) is str
    if isinstance(shape, tuple):   # (int, None): a count or null
        return value is None or _fits(value, shape[0])
    return type(value) is str and value in shape   # a grade name


def _windows(body: dict[str, Any]) -> str | None:
    if set(body) != {"worker", *Windows._fields} or type(body["worker"]) is not str:
        return f"the fields are not worker and {', '.join(Windows._fields)}"
    columns = [body[name] for name in Windows._fields]
    if not all(type(column) is list for column in columns):
        return "a column is not a list"
    windows, shares = len(body["seq"]), body["shares"]
    for name, shape in (*_PER_WINDOW.items(), *_PER_SHARE.items()):
        if not all(_fits(value, shape) for value in body[name]):
            return f"{name} holds a value of the wrong type"
    if any(len(body[name]) != windows for name in _PER_WINDOW):
        return "the per-window columns differ in length"
    if any(len(body[name]) != sum(shares) for name in _PER_SHARE):
        return "the share columns do not hold the shares the windows count"
    if any(a >= b for a, b in zip(body["seq"], body["seq"][1:])):
        return "seq does not increase"
    return None
