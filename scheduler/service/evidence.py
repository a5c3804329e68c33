"""The evidence rules: what an agent's window must be before the scheduler
counts it (RULES §10, "a figure is evidence only if the scheduler can check
it against what it knows").

Rule 1, after h11: every check of a window lives in this file, as data
(`RULES`, in the order a window's first failure is reported), and every
batch goes through one door, `check`. A batch with any bad window is refused
whole, naming the earliest bad window and its first broken rule; nothing of
it is recorded.

What the rules read, and where it comes from:

- the host's registered devices and their types (its last Register);
- the host's counted seq (the kernel's `acked`, durable) and each device's
  last counted end (`Observed.ends`, rebuilt by replay and kept in
  checkpoints), so a restart keeps both;
- the occupancies the scheduler recorded for the host (`Occupancies`, one
  per receipt that changed them, rebuilt by replay) and when each was
  superseded: the time the scheduler first *sent* a newer one to the host;
- the scheduler's clock, and the stated limits (`[limits]`).

Version 0 is "no occupancy yet": an agent that has not heard from the
scheduler splits every device wholly to `unallocated`. That is accepted for
windows ending before the current stream sent its first occupancy (plus the
grace), since the agent may have been measuring before it could connect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from itertools import accumulate, compress, count, repeat
from operator import ge, is_, le, sub
from typing import NamedTuple

from protos.energy import NS_PER_S, UNALLOCATED, Grade, split
from protos.pool.v1 import types_pb2
from scheduler.kernel.limits import NAME
from scheduler.service.config import Limits
from scheduler.service.errors import Refused
from scheduler.service.occupancies import HISTORY, Issued
from scheduler.service.observed import CPU_PREFIX, Windows

_SOLE = {UNALLOCATED: 1}  # the weights of a device nobody occupies, or that the scheduler did not describe
_SHOWN = 4               # shares quoted in a refusal


# -- the rules -----------------------------------------------------------------------

class Context(NamedTuple):
    """What the rules check a host's batch against."""

    host: str
    device_types: Mapping[str, str]   # registered device id -> its type ("cpu" for a CPU package)
    packages: frozenset[str]          # the registered CPU packages (their occupancy is CPU_PREFIX's)
    acked: int                        # the highest seq counted for the host
    ends: Mapping[str, int]           # device id -> end_ns of its last counted window
    now_ns: int
    limits: Limits
    occupancy: Callable[[int], Issued | None]   # an occupancy version -> what was sent under it


def check(ctx: Context, windows: Windows, versions: list[int]) -> None:
    """Refuse the batch if any window breaks a rule: INVALID_WINDOW naming the
    earliest bad window, and for it the first rule it breaks. `windows` are
    the batch's new windows (above the counted seq); `versions` their
    occupancy versions."""
    found = [(first, rule) for rule, flags in _rules(ctx, windows, versions)
             if (first := next(compress(count(), flags), None)) is not None]
    if found:
        first, rule = min(found, key=lambda f: f[0])   # min keeps the first rule among equals
        raise Refused("INVALID_WINDOW", f"window seq {windows.seq[first]} from {ctx.host!r}: {rule(first)}")


def check_order(host: str, windows: Windows) -> None:
    """Seqs start at 1 and increase within a batch: checked on the whole batch,
    resends included, before the new windows are picked out by seq."""
    check_columns(host, windows, [(lambda i: "seq must be ≥ 1 and above the seq before it",
                                   map(ge, [0, *windows.seq], windows.seq))])


def check_columns(host: str, windows: Windows, rules: list) -> None:
    for rule, flags in rules:
        first = next(compress(count(), flags), None)
        if first is not None:
            raise Refused("INVALID_WINDOW", f"window seq {windows.seq[first]} from {host!r}: {rule(first)}")


def _rules(ctx: Context, w: Windows, versions: list[int]) -> list[tuple[Callable[[int], str], Iterable]]:
    """Each rule: what it says about window i, and a flag per window (true:
    broken). A rule whose columns pass a whole-column test flags nothing
    without looking at each window."""
    limits = ctx.limits
    unknown = {d for d in set(w.device) - ctx.device_types.keys()
               if not (d.startswith(CPU_PREFIX) and NAME.fullmatch(d))}
    bounds = list(accumulate(w.shares, initial=0))
    total = list(accumulate(w.share_uj, initial=0))
    sums = list(map(sub, map(total.__getitem__, bounds[1:]), map(total.__getitem__, bounds)))
    latest, earliest = ctx.now_ns + limits.clock_skew_s * NS_PER_S, ctx.now_ns - limits.max_window_age_s * NS_PER_S
    previous = _previous_ends(ctx.ends, w)
    power = {d: ctx.limits.power_w(ctx.device_types.get(d, "cpu")) for d in set(w.device)}
    mismatch = _occupancy_problems(ctx, w, versions, bounds)
    return [
        (lambda i: f"device {w.device[i]!r} was not registered",
         map(unknown.__contains__, w.device) if unknown else ()),
        (lambda i: f"seq is more than {limits.max_seq_advance} above the {ctx.acked} counted",
         (s - ctx.acked > limits.max_seq_advance for s in w.seq) if w.seq and w.seq[-1] - ctx.acked
         > limits.max_seq_advance else ()),
        (lambda i: "end_ns must be after start_ns", map(le, w.end_ns, w.start_ns)),
        (lambda i: f"end_ns {w.end_ns[i]} is more than {limits.clock_skew_s} s after the scheduler's clock",
         (e > latest for e in w.end_ns) if max(w.end_ns, default=0) > latest else ()),
        (lambda i: f"start_ns {w.start_ns[i]} is more than {limits.max_window_age_s} s before the scheduler's clock",
         (s < earliest for s in w.start_ns) if min(w.start_ns, default=earliest) < earliest else ()),
        (lambda i: f"start_ns {w.start_ns[i]} is before the end of the device's previous window, {previous[i]}",
         map(lt_, w.start_ns, previous)),
        (lambda i: "the window and each of its shares need a grade", _ungraded(w)),
        (lambda i: "a window with no figure has no shares",
         (u is None and n for u, n in zip(w.uj, w.shares)) if None in w.uj else ()),
        (lambda i: "a window with a figure has no gap reason",
         (u is not None and g is not None for u, g in zip(w.uj, w.gap)) if w.gap is not None else ()),
        (lambda i: f"{w.uj[i]} µJ in {w.end_ns[i] - w.start_ns[i]} ns is above {power[w.device[i]]} W, "
                   f"the most a {ctx.device_types.get(w.device[i], 'cpu')!r} device may draw",
         (u is not None and u * NS_PER_S > (e - s) * power[d] * 1_000_000
          for u, s, e, d in zip(w.uj, w.start_ns, w.end_ns, w.device))),
        (lambda i: f"shares sum to {sums[i]}, not {w.uj[i]}",
         (n and u is not None and s != u for n, u, s in zip(w.shares, w.uj, sums)) if sums != w.uj else ()),
        (lambda i: mismatch[i], map(bool, mismatch)),
    ]


def lt_(a: int, b: int) -> bool:
    return a < b


def _previous_ends(ends: Mapping[str, int], w: Windows) -> list[int]:
    """For each window, the end of the window before it on its device: in the
    batch, else the last one counted (0 for a device's first window)."""
    last = dict(ends)
    out = []
    for device, end in zip(w.device, w.end_ns):
        out.append(last.get(device, 0))
        last[device] = end
    return out


def _occupancy_problems(ctx: Context, w: Windows, versions: list[int], bounds: list[int]) -> list[str]:
    """Per window, what is wrong with its shares against the occupancy it
    names ("" when nothing): a version the scheduler never sent, or one
    superseded more than the grace before the window ended, or shares that
    are not that occupancy's split of the window's µJ (RULES §2)."""
    grace = ctx.limits.occupancy_grace_s * NS_PER_S
    found: dict[int, Issued | None] = {}
    out = []
    for i, (device, uj, grade, version) in enumerate(zip(w.device, w.uj, w.grade, versions)):
        if uj is None or grade is None:
            out.append("")   # no figure, no shares: nothing to split; a missing grade is its own rule
            continue
        entry = found[version] if version in found else found.setdefault(version, ctx.occupancy(version))
        if entry is None:
            out.append(f"occupancy version {version} is not one the scheduler sent to {ctx.host!r} "
                       f"(or it is older than the last {HISTORY} of the host)")
            continue
        if entry.superseded_ns is not None and w.end_ns[i] > entry.superseded_ns + grace:
            out.append(f"occupancy version {version} was superseded at {entry.superseded_ns}, "
                       f"more than {ctx.limits.occupancy_grace_s} s before the window ended")
            continue
        key = device if device in entry.weights else CPU_PREFIX if device in ctx.packages else None
        weights = entry.weights.get(key) or _SOLE
        expected = expected_shares(uj, weights, grade)
        got = list(zip(w.occupant[bounds[i]:bounds[i + 1]], w.share_uj[bounds[i]:bounds[i + 1]],
                       w.share_grade[bounds[i]:bounds[i + 1]]))
        if got != expected:
            out.append(f"shares {_quote(got)} are not occupancy version {version}'s split: {_quote(expected)}")
        else:
            out.append("")
    return out


def expected_shares(uj: int, weights: dict[str, int], grade: str) -> list[tuple[str, int, str]]:
    """The shares RULES §2 gives `uj` split by `weights`, as (occupant, µJ, grade
    name): protos.energy.split, with a sole occupant (the usual idle device)
    taken whole without it. tests/e2e/test_windows.py checks both against split."""
    if len(weights) == 1:
        [(occupant, weight)] = weights.items()
        if weight > 0:
            return [(occupant, uj, grade)]   # one occupant keeps the window's grade (split_grade)
    return [(s.occupant, s.uj, s.grade.name) for s in split(uj, weights, Grade[grade])]


def _quote(shares: list[tuple]) -> str:
    shown = ", ".join(f"{o}={uj}/{g}" for o, uj, g in shares[:_SHOWN])
    return f"[{shown}{', …' if len(shares) > _SHOWN else ''}] ({len(shares)})"


def _ungraded(w: Windows) -> Iterable[bool]:
    if None not in w.grade and None not in w.share_grade:
        return ()
    owners = set(compress(w.window_of_shares(), map(is_, w.share_grade, repeat(None))))
    return (g is None or i in owners for i, g in enumerate(w.grade))


def device_types(meters: Iterable[types_pb2.DeviceMeter]) -> dict[str, str]:
    """Registered device id -> the type its power ceiling is looked up by."""
    return {m.device_id: "cpu" if m.kind == types_pb2.CPU_PACKAGE else m.device_type for m in meters}
