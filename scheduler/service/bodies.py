"""The shapes of the scheduler's own receipt bodies, for verify (`bodies=check`):
each kind is judged by the decoder replay uses, so the check and the fold
cannot disagree — kernel events by `event_from_body`, a checkpoint's state by
`state.restore`, and `windows` column by column (docs/LEDGER.md, "The
scheduler's receipt kinds"). A kind the scheduler never writes is not judged
here: the ledger format is open to other writers.
"""

from __future__ import annotations

import functools
from typing import Any

from scheduler.kernel import event_from_body
from scheduler.kernel.events import EVENT_TYPES
from scheduler.ledger.receipts import CHECKPOINT, Entry
from scheduler.ledger.verify import Sequential
from scheduler.service.state import ServiceState, restore, snapshot
from scheduler.service.windows.batch import GAP_NAMES, GRADES, WINDOWS, Windows

# each column's values; per window unless in _PER_SHARE. `gap` and `lost` are
# optional (only in a batch with a gap). A column added to Windows later and
# not named here is only checked to be a list.
_PER_WINDOW = {"device": str, "seq": int, "start_ns": int, "end_ns": int, "uj": (int, None), "grade": GRADES,
               "shares": int, "gap": (str, None), "lost": int}
_PER_SHARE = {"occupant": str, "share_uj": int, "share_grade": GRADES}

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
    return frozenset(snapshot(ServiceState()))


def _checkpoint_state(state: Any) -> str | None:
    if type(state) is not dict or set(state) != _checkpoint_fields():
        return f"state is not a map of {sorted(_checkpoint_fields())}"
    restore(state)
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
    optional = set(Windows._field_defaults)
    required = {"worker", *Windows._fields} - optional
    if not required <= set(body) <= required | optional or type(body["worker"]) is not str:
        return f"the fields are not worker and {', '.join(Windows._fields)} (the last {len(optional)} optional)"
    columns = {name: body[name] for name in Windows._fields if name in body}
    if not all(type(column) is list for column in columns.values()):
        return "a column is not a list"
    windows, shares = len(body["seq"]), body["shares"]
    for name, column in columns.items():
        shape = _PER_WINDOW.get(name) or _PER_SHARE.get(name)
        if shape is not None and not all(_fits(value, shape) for value in column):
            return f"{name} holds a value of the wrong type"
    if any(len(column) != windows for name, column in columns.items() if name in _PER_WINDOW):
        return "the per-window columns differ in length"
    if any(len(column) != sum(shares) for name, column in columns.items() if name in _PER_SHARE):
        return "the share columns do not hold the shares the windows count"
    if any(a >= b for a, b in zip(body["seq"], body["seq"][1:])):
        return "seq does not increase"
    return _window_meaning(body)


GAP_REASONS = frozenset(GAP_NAMES.values())   # a gap's reason by name (null: the agent gave none)


def _window_meaning(body: dict[str, Any]) -> str | None:
    """What the scheduler refuses in a window (evidence.py) and can be seen in
    the body alone, per window in order (docs/LEDGER.md, "windows")."""
    if ("gap" in body) != ("lost" in body):
        return "gap and lost come together (a batch with a gap) or not at all"
    bounds = [0]
    for n in body["shares"]:
        bounds.append(bounds[-1] + n)
    gap, lost = body.get("gap"), body.get("lost")
    for i, seq in enumerate(body["seq"]):
        uj, start, end = body["uj"][i], body["start_ns"][i], body["end_ns"][i]
        where = f"window seq {seq}"
        if end <= start:
            return f"{where}: end_ns {end} is not after start_ns {start}"
        if uj is None and body["shares"][i]:
            return f"{where}: a window with no figure has no shares"
        if gap is not None and gap[i] is not None and gap[i] not in GAP_REASONS:
            return f"{where}: gap reason {gap[i]!r} is not one of {', '.join(sorted(GAP_REASONS))}"
        if uj is not None and gap is not None and gap[i] is not None:
            return f"{where}: a window with a figure has no gap reason"
        if uj is not None and lost is not None and lost[i]:
            return f"{where}: lost windows are counted only on a gap"
        shared = sum(body["share_uj"][bounds[i]:bounds[i + 1]])
        if uj is not None and body["shares"][i] and shared != uj:
            return f"{where}: shares sum to {shared}, not the window's {uj} µJ"
    return None


class Tiling(Sequential):
    """A device's counted windows do not overlap: each starts at or after the
    end of the device's previous one (evidence.py). Windows at or below the
    host's highest seq so far are resends, which change nothing."""
    kinds = frozenset({WINDOWS})

    def __init__(self) -> None:
        self.acked: dict[str, int] = {}            # worker -> its highest window seq
        self.ends: dict[tuple[str, str], int] = {}  # (worker, device) -> end_ns of its last window

    def wrong(self, entry: Entry) -> str | None:
        body = entry.body
        worker = body["worker"]
        acked = self.acked.get(worker, 0)
        for i, seq in enumerate(body["seq"]):
            if seq <= acked:
                continue
            device = (worker, body["device"][i])
            previous = self.ends.get(device)
            if previous is not None and body["start_ns"][i] < previous:
                return (f"{WINDOWS}: window seq {seq} of {worker}/{device[1]} starts at {body['start_ns'][i]}, "
                        f"before the device's previous window ended at {previous}")
            self.ends[device] = body["end_ns"][i]
            acked = seq
        self.acked[worker] = acked
        return None
