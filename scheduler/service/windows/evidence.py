"""The evidence rules: what an agent's window must be before the scheduler
counts it (RULES §10, "a figure is evidence only if the scheduler can check
it against what it knows").

Rule 1, after h11: every check of a window lives in this file, as data
(`_rules`, in the order a window's first failure is reported), and every
batch goes through one door, `admit`: its seqs in order, then only its new
windows (above the host's counted seq, the kernel's own rule
`kernel.counted`/`kernel.fresh`: a window is counted once), then the rules.
A batch with any bad window is refused whole, naming the earliest bad window
and its first broken rule; nothing of it is recorded. One rule is judged
earlier, as the batch arrives and before flow control reads its windows in:
its size (`sized`, limits.max_windows_per_batch). What the ledger needs of
a body (item types, integer range, size) is window_body.py's.

Each rule is written plainly, for one window (`WindowRule.broken`), and comes with
a test over whole columns (`WindowRule.holds`) that passes a good batch without a
look at each window: a batch of 1,000 windows costs a few dozen list
operations at C speed, not 12,000 rule calls. The column tests are the only
speed trick here, and the plain check (window by window, rule by rule,
`check_plainly` in tests/service/test_evidence_columns.py) is the reference
they are tested against.
The occupancy rule's column test is a module of its own, splits_held.py;
the columns the rules derive from a batch (share bounds and sums, each
device's previous end) are columns.py's.

What the rules read, and where it comes from:

- the host's registered devices and their types (its last Register);
- the host's counted seq (`kernel.counted`, durable) and each device's
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
from itertools import compress, count, repeat
from operator import ge, is_not, lt
from typing import NamedTuple

from protos.energy import NS_PER_S, GapReason
from protos.limits import LOST_WINDOW_NS
from protos.pool.v1 import types_pb2
from protos.refusals import window_seq_metadata
from scheduler.kernel.limits import NAME
from scheduler.service.windows.columns import Derived
from scheduler.service.config import Limits
from scheduler.service.errors import Refused
from scheduler.service.windows.occupancy import HISTORY, Issued
from scheduler.service.windows.batch import CPU_PREFIX, Windows
from scheduler.service.windows.splits_held import device_weights, expected_shares, shares_hold

_SHOWN = 4               # shares quoted in a refusal
GAP_REASONS = frozenset(GapReason.__members__)   # the gap reasons the contract names, as the body has them


def lost_allowed(start_ns: int, end_ns: int) -> int:
    """The most measured windows a gap from start_ns to end_ns can stand for:
    one per LOST_WINDOW_NS of its span, and one more (an agent's windows are no
    shorter than its meters' ~100 ms update, and a refused window's gap stands
    for that one window whatever its span)."""
    return max(0, end_ns - start_ns) // LOST_WINDOW_NS + 1


# -- the rules -----------------------------------------------------------------------

class Context(NamedTuple):
    """What the rules check a host's batch against."""

    host: str
    device_types: Mapping[str, str]   # registered device id -> its type ("cpu" for a CPU package)
    packages: frozenset[str]          # the registered CPU packages (their occupancy is CPU_PREFIX's)
    acked: int                        # the host's counted seq (kernel.counted)
    ends: Mapping[str, int]           # device id -> end_ns of its last counted window
    now_ns: int
    limits: Limits
    occupancy: Callable[[int], Issued | None]   # an occupancy version -> what was sent under it


class WindowRule(NamedTuple):
    """One rule a window must pass, as data (h11). `broken(i)` is the rule
    itself, for window i, written plainly; `says(i)` what it says about that
    window. `holds()` is the speed trick: a test over whole columns, true
    only when no window of the batch breaks the rule, so that a good batch is
    not looked at window by window. It may answer false when unsure (then
    `broken` decides); tests/service/test_evidence_columns.py checks it
    against `broken`, and `check` against its `check_plainly`, on random and
    hostile batches."""

    broken: Callable[[int], bool]
    says: Callable[[int], str]
    holds: Callable[[], bool]


def sized(windows: int, limits: Limits) -> None:
    """A batch holds at most limits.max_windows_per_batch windows (TOO_LARGE):
    judged on the message's window count as it arrives."""
    if windows > limits.max_windows_per_batch:
        raise Refused("TOO_LARGE", f"a batch of {windows} windows is over the "
                                   f"{limits.max_windows_per_batch} allowed (limits.max_windows_per_batch)")


def admit(ctx: Context, windows: Windows, versions: list[int], mean_uw: list[int | None] | None = None
          ) -> tuple[Windows, list[int]]:
    """The door: the batch's new windows (above `ctx.acked`, the host's
    counted seq) and their occupancy versions, once every rule passes; else
    INVALID_WINDOW (Refused) and nothing of the batch counts. `mean_uw`: what
    each window states its mean power is (None: unstated, or not given)."""
    check_order(ctx.host, windows)
    fresh = windows.since(ctx.acked)
    resent = len(windows.seq) - len(fresh.seq)
    check(ctx, fresh, versions[resent:], None if mean_uw is None else mean_uw[resent:])
    return fresh, versions[resent:]


def check(ctx: Context, windows: Windows, versions: list[int], mean_uw: list[int | None] | None = None) -> None:
    """Refuse the batch if any window breaks a rule: INVALID_WINDOW naming the
    earliest bad window, and for it the first rule it breaks. `windows` are
    the batch's new windows (above the counted seq); `versions` their
    occupancy versions. A rule whose whole-column test passes costs no look
    at each window."""
    everyone = range(len(windows.seq))
    found = [(first, rule) for rule in _rules(ctx, windows, versions, mean_uw)
             if not rule.holds() and (first := next(filter(rule.broken, everyone), None)) is not None]
    if found:
        first, rule = min(found, key=lambda f: f[0])   # min keeps the first rule among equals
        _refuse(ctx.host, windows, first, rule.says)


def _refuse(host: str, windows: Windows, i: int, says: Callable[[int], str]) -> None:
    raise Refused("INVALID_WINDOW", f"window seq {windows.seq[i]} from {host!r}: {says(i)}",
                  window_seq_metadata(windows.seq[i]))   # the agent's cue to send the windows before it


def check_order(host: str, windows: Windows) -> None:
    """Seqs start at 1 and increase within a batch: checked on the whole batch,
    resends included, before the new windows are picked out by seq."""
    first = next(compress(count(), map(ge, [0, *windows.seq], windows.seq)), None)
    if first is not None:
        _refuse(host, windows, first, lambda i: "seq must be ≥ 1 and above the seq before it")


def _rules(ctx: Context, w: Windows, versions: list[int], mean_uw: list[int | None] | None = None) -> list[WindowRule]:
    """The rules, in the order a window's first broken one is reported."""
    limits = ctx.limits
    derived = Derived(w, ctx.ends)
    unknown = {d for d in derived.devices - ctx.device_types.keys()
               if not (d.startswith(CPU_PREFIX) and NAME.fullmatch(d))}
    latest, earliest = ctx.now_ns + limits.clock_skew_s * NS_PER_S, ctx.now_ns - limits.max_window_age_s * NS_PER_S
    power = {d: ctx.limits.power_w(ctx.device_types.get(d, "cpu")) for d in derived.devices}
    entry = _memo(ctx.occupancy)
    problems = _memo(lambda _: _occupancy_problems(ctx, w, versions, derived.bounds, entry))
    return [
        WindowRule(lambda i: w.device[i] in unknown,
             lambda i: f"device {w.device[i]!r} was not registered",
             lambda: not unknown),
        WindowRule(lambda i: w.seq[i] - ctx.acked > limits.max_seq_advance,
             lambda i: f"seq is more than {limits.max_seq_advance} above the {ctx.acked} counted",
             lambda: max(w.seq, default=ctx.acked) - ctx.acked <= limits.max_seq_advance),
        WindowRule(lambda i: w.end_ns[i] <= w.start_ns[i],
             lambda i: "end_ns must be after start_ns",
             lambda: derived.shortest is None or derived.shortest > 0),
        WindowRule(lambda i: w.end_ns[i] > latest,
             lambda i: f"end_ns {w.end_ns[i]} is more than {limits.clock_skew_s} s after the scheduler's clock",
             lambda: max(w.end_ns, default=latest) <= latest),
        WindowRule(lambda i: w.start_ns[i] < earliest,
             lambda i: f"start_ns {w.start_ns[i]} is more than {limits.max_window_age_s} s before the scheduler's clock",
             lambda: min(w.start_ns, default=earliest) >= earliest),
        WindowRule(lambda i: w.start_ns[i] < derived.previous[i],
             lambda i: f"start_ns {w.start_ns[i]} is before the end of the device's previous window, "
                       f"{derived.previous[i]}",
             lambda: not any(map(lt, w.start_ns, derived.previous))),
        WindowRule(lambda i: w.grade[i] is None or None in w.share_grade[derived.bounds[i]:derived.bounds[i + 1]],
             lambda i: "the window and each of its shares need a grade",
             lambda: None not in w.grade and None not in w.share_grade),
        WindowRule(lambda i: w.uj[i] is None and w.shares[i] > 0,
             lambda i: "a window with no figure has no shares",
             lambda: None not in w.uj),
        WindowRule(lambda i: w.uj[i] is not None and w.gap is not None and w.gap[i] is not None,
             lambda i: "a window with a figure has no gap reason",
             lambda: w.gap is None),
        WindowRule(lambda i: w.gap is not None and w.gap[i] is not None and w.gap[i] not in GAP_REASONS,
             lambda i: f"gap_reason {w.gap[i]} is not a GapReason value",
             lambda: w.gap is None or set(w.gap) <= GAP_REASONS | {None}),
        WindowRule(lambda i: w.lost is not None and w.lost[i] > 0 and w.uj[i] is not None,
             lambda i: "a window with a figure has no lost windows (lost_windows is for gaps)",
             lambda: w.lost is None or not any(compress(w.lost, map(is_not, w.uj, repeat(None))))),
        WindowRule(lambda i: w.lost is not None and w.lost[i] > lost_allowed(w.start_ns[i], w.end_ns[i]),
             lambda i: f"lost_windows {w.lost[i]} is more than a gap of {w.end_ns[i] - w.start_ns[i]} ns can "
                       f"hold ({lost_allowed(w.start_ns[i], w.end_ns[i])}: one window per "
                       f"{LOST_WINDOW_NS // 1_000_000} ms, and one more)",
             lambda: w.lost is None or not any(w.lost) or derived.shortest is not None
             and max(w.lost) <= lost_allowed(0, max(0, derived.shortest))),
        WindowRule(lambda i: mean_uw is not None and mean_uw[i] != derived.mean_uw[i] and mean_uw[i] is not None,
             lambda i: (f"mean_uw {mean_uw[i]} is not what {w.uj[i]} µJ in {w.end_ns[i] - w.start_ns[i]} ns give, "
                        f"{derived.mean_uw[i]}") if derived.mean_uw[i] is not None else
                       "a window with no figure has no mean_uw",
             lambda: mean_uw is None or derived.mean_uw == mean_uw or all(m is None for m in mean_uw)),
        WindowRule(lambda i: w.uj[i] is not None and w.uj[i] * NS_PER_S > (w.end_ns[i] - w.start_ns[i])
             * power[w.device[i]] * 1_000_000,
             lambda i: f"{w.uj[i]} µJ in {w.end_ns[i] - w.start_ns[i]} ns is above {power[w.device[i]]} W, "
                       f"the most a {ctx.device_types.get(w.device[i], 'cpu')!r} device may draw",
             lambda: _within_power(w, derived, power)),
        WindowRule(lambda i: w.shares[i] > 0 and w.uj[i] is not None and derived.sums[i] != w.uj[i],
             lambda i: f"shares sum to {derived.sums[i]}, not {w.uj[i]}",
             lambda: derived.sums == w.uj),
        WindowRule(lambda i: bool(problems(None)[i]),
             lambda i: problems(None)[i],
             lambda: shares_hold(w, versions, entry, ctx.packages, limits.occupancy_grace_s)),
    ]


def _memo(function: Callable) -> Callable:
    """`function`, computed once per argument."""
    known: dict = {}
    return lambda key: known[key] if key in known else known.setdefault(key, function(key))


def _within_power(w: Windows, derived: Derived, power: Mapping[str, int]) -> bool:
    """No window draws above its device's ceiling, judged on the extremes:
    the largest figure in the shortest window against the lowest ceiling."""
    top = max(filter(None, w.uj), default=0)
    return top == 0 or derived.shortest > 0 and top * NS_PER_S <= derived.shortest * min(power.values()) * 1_000_000


def _occupancy_problems(ctx: Context, w: Windows, versions: list[int], bounds: list[int],
                        entry: Callable[[int], Issued | None]) -> list[str]:
    """Per window, what is wrong with its shares against the occupancy it
    names ("" when nothing): a version the scheduler never sent, or one
    superseded more than the grace before the window ended, or shares that
    are not that occupancy's split of the window's µJ (RULES §2)."""
    grace = ctx.limits.occupancy_grace_s * NS_PER_S
    out = []
    for i, (device, uj, grade, version) in enumerate(zip(w.device, w.uj, w.grade, versions)):
        if uj is None or grade is None:
            out.append("")   # no figure, no shares: nothing to split; a missing grade is its own rule
            continue
        issued = entry(version)
        if issued is None:
            out.append(f"occupancy version {version} is not one the scheduler sent to {ctx.host!r} "
                       f"(or it is older than the last {HISTORY} of the host)")
            continue
        if issued.superseded_ns is not None and w.end_ns[i] > issued.superseded_ns + grace:
            out.append(f"occupancy version {version} was superseded at {issued.superseded_ns}, "
                       f"more than {ctx.limits.occupancy_grace_s} s before the window ended")
            continue
        expected = expected_shares(uj, device_weights(issued, device, ctx.packages), grade)
        got = list(zip(w.occupant[bounds[i]:bounds[i + 1]], w.share_uj[bounds[i]:bounds[i + 1]],
                       w.share_grade[bounds[i]:bounds[i + 1]]))
        if got != expected:
            out.append(f"shares {_quote(got)} are not occupancy version {version}'s split: {_quote(expected)}")
        else:
            out.append("")
    return out


def _quote(shares: list[tuple]) -> str:
    shown = ", ".join(f"{o}={uj}/{g}" for o, uj, g in shares[:_SHOWN])
    return f"[{shown}{', …' if len(shares) > _SHOWN else ''}] ({len(shares)})"


def device_types(meters: Iterable[types_pb2.DeviceMeter]) -> dict[str, str]:
    """Registered device id -> the type its power ceiling is looked up by."""
    return {m.device_id: "cpu" if m.kind == types_pb2.CPU_PACKAGE else m.device_type for m in meters}
