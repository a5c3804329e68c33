"""Noticing an agent whose windows disagree with its own history
(docs/OPERATIONS.md, "Security": what an agent is trusted with).

The evidence rules (evidence.py) hold every window to what the scheduler
can check; within them an agent is trusted on its own host. What it cannot
hide is its devices' own history: a device at work does not draw less than
it draws idle. So each device's idle floor is learned from the host's own
windows, the lowest mean power of a window in which no claim occupied the
device (the whole figure `unallocated`'s), once FLOOR_WINDOWS such windows
were seen; and a window in which claims occupy the device and whose mean
power is below half that floor disagrees with it. Each one is counted per
host (`pool_host_windows_below_idle_floor_total`), each device's floor is a
gauge (`pool_device_idle_floor_watts`, to hold against what the device type
draws idle), and the first such window of a host, then at most one a
minute, is logged as a warning naming the host, device, window and figures.

A projection like the split rows: fed by every `windows` receipt folded,
live and in replay, and never read by a decision.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from itertools import repeat
from operator import floordiv, mul, sub

from protos.energy import NS_PER_S, UNALLOCATED
from scheduler.service.windows.batch import Windows

log = logging.getLogger("pool.scheduler.evidence")
FLOOR_WINDOWS = 10    # idle windows a device shows before its floor is judged by
LOG_EVERY_S = 60.0    # per host, after its first warning


class Floors:
    def __init__(self) -> None:
        self.floor_uw: dict[tuple[str, str], int] = {}          # (host, device) -> lowest idle mean µW
        self._idle_seen: dict[tuple[str, str], int] = defaultdict(int)
        self.below: dict[str, int] = defaultdict(int)           # host -> windows below their device's floor
        self._logged: dict[str, float] = {}                      # host -> monotonic s of its last warning

    def judged(self) -> dict[tuple[str, str], int]:
        """The floors windows are judged by: devices with FLOOR_WINDOWS idle windows or more."""
        return {key: uw for key, uw in self.floor_uw.items() if self._idle_seen[key] >= FLOOR_WINDOWS}

    def feed(self, host: str, w: Windows) -> None:
        """A host's new windows, as counted."""
        spans = list(map(sub, w.end_ns, w.start_ns))
        if None in w.uj or not spans or min(spans) <= 0:
            w = _measured(w)
            if not w.seq:
                return
            spans = list(map(sub, w.end_ns, w.start_ns))
        if w.shares == [1] * len(w.shares) and w.occupant.count(UNALLOCATED) == len(w.occupant):
            # every device idle, the usual batch: no look at each share; and when every window
            # lasts as long (an agent's fixed window), each device's lowest µJ gives its lowest mean
            if spans.count(spans[0]) == len(spans):
                self._idle(host, *_lowest(w.device, w.uj, spans[0]))
            else:
                self._idle(host, w.device, list(map(floordiv, map(mul, w.uj, repeat(NS_PER_S)), spans)))
            return
        means = list(map(floordiv, map(mul, w.uj, repeat(NS_PER_S)), spans))
        first = 0
        for i, (device, n) in enumerate(zip(w.device, w.shares)):   # in order: a window is judged by those before
            if n == 1 and w.occupant[first] == UNALLOCATED:
                self._idle(host, [device], [means[i]])
            else:
                self._busy(host, w, i, means[i])
            first += n

    def _idle(self, host: str, devices: list[str], means: list[int], counts: list[int] | None = None) -> None:
        """Idle windows' means on `devices` (with `counts`: one lowest mean per
        device, standing for that many windows)."""
        floor, seen = self.floor_uw, self._idle_seen
        for k, (device, device_means) in enumerate(_by_device(devices, means)):
            key, low = (host, device), min(device_means)
            seen[key] += len(device_means) if counts is None else counts[k]
            if low < floor.get(key, low + 1):
                floor[key] = low

    def _busy(self, host: str, w: Windows, i: int, mean: int) -> None:
        key = (host, w.device[i])
        floor = self.floor_uw.get(key)
        if floor is None or self._idle_seen[key] < FLOOR_WINDOWS or 2 * mean >= floor:
            return
        self.below[host] += 1
        now = time.monotonic()
        if host not in self._logged or now - self._logged[host] >= LOG_EVERY_S:
            self._logged[host] = now
            log.warning("host %r: window seq %d on %s draws %d µW while claims occupy the device, below half its "
                        "idle floor of %d µW (the lowest of its %d idle windows): the agent's figures disagree "
                        "with its own history (%d such windows from this host so far)", host, w.seq[i],
                        w.device[i], mean, floor, self._idle_seen[key], self.below[host])


def _by_device(devices: list[str], means: list[int]) -> list[tuple[str, list[int]]]:
    """Each device with its windows' means. When the devices repeat in one
    fixed order (an agent cuts every device at each boundary: the usual
    batch), a slice each, as columns.Derived.previous does; else one by one.
    tests/service/test_windows.py holds Floors to a window-by-window count."""
    period = len(set(devices[:64]))
    if period and devices[period:] == devices[:-period] and len(set(devices[:period])) == period:
        return [(devices[i], means[i::period]) for i in range(period)]
    grouped: dict[str, list[int]] = {}
    for device, mean in zip(devices, means):
        grouped.setdefault(device, []).append(mean)
    return list(grouped.items())


def _lowest(devices: list[str], uj: list[int], span: int) -> tuple[list[str], list[int], list[int]]:
    """For windows all `span` long: each device once, with its lowest mean
    (its lowest µJ over the span) and how many windows it had."""
    grouped = _by_device(devices, uj)
    return ([d for d, _ in grouped], [min(u) * NS_PER_S // span for _, u in grouped],
            [len(u) for _, u in grouped])


def _measured(w: Windows) -> Windows:
    """The windows with a figure and a positive span (their shares with them)."""
    keep = [i for i, (uj, s, e) in enumerate(zip(w.uj, w.start_ns, w.end_ns)) if uj is not None and e > s]
    bounds = [0]
    for n in w.shares:
        bounds.append(bounds[-1] + n)
    shares = [j for i in keep for j in range(bounds[i], bounds[i + 1])]
    return Windows(*([column[i] for i in keep] for column in w[:7]),
                   *([column[j] for j in shares] for column in w[7:10]))
