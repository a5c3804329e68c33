"""The energy vocabulary both sides speak: grades, units and the device split.

Everything here is integer arithmetic (RULES §0): µJ, µW, ns and milli-devices.
The split is RULES §2: largest remainder, ties to the smallest occupant id, the
total always conserved, and HwShunt degraded to ModelBased on division.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import IntEnum
from typing import NamedTuple

UNALLOCATED = "unallocated"
MDEV_PER_DEVICE = 1000
NS_PER_S = 1_000_000_000


class Grade(IntEnum):
    """Provenance of an energy figure. A larger value is a worse grade; the
    values equal the wire enum `pool.v1.Grade`."""

    HwShunt = 1
    ModelBased = 2
    Estimator = 3

    @classmethod
    def parse(cls, name: str) -> Grade:
        try:
            return cls[name]
        except KeyError:
            raise ValueError(f"unknown grade {name!r}: expected one of {', '.join(g.name for g in cls)}") from None


class GapReason(IntEnum):
    """Why a window has no energy figure; the values equal the wire enum
    `pool.v1.GapReason` (0, not a gap, is `None` here)."""

    AgentDown = 1       # nobody measured and the counter cannot be proven to carry the span
    CounterReset = 2    # driver reload, GPU reset, reboot, or the counter went back
    MeterError = 3      # a failed reading, or a stalled counter
    SpoolOverflow = 4   # measured windows merged into one gap because the agent's spool was full
    Refused = 270       # a window the scheduler refused on consecutive sessions, replaced by this gap


def worst(grades: Iterable[Grade]) -> Grade:
    """The grade of an aggregate: the worst of its parts. An aggregate of
    nothing has no grade, so an empty input is an error, not a default."""
    result = max(grades, default=None)
    if result is None:
        raise ValueError("worst() of no grades: an empty aggregate has no grade")
    return Grade(result)


def sum_graded(parts: Iterable[tuple[int, Grade | None]]) -> tuple[int, Grade | None]:
    """An aggregate of graded figures: the µJ summed, graded by the worst
    part. A part graded None is nothing measured: it adds its µJ and no
    grade, and an aggregate with no graded part has no grade (None)."""
    total, grades = 0, []
    for uj, grade in parts:
        total += uj
        if grade is not None:
            grades.append(grade)
    return total, worst(grades) if grades else None


class SplitError(ValueError):
    """A split that cannot be made: no occupants, zero total weight, a bad figure."""


class Share(NamedTuple):   # a NamedTuple, not a dataclass: poolctl imports this module and not dataclasses
    occupant: str
    uj: int
    grade: Grade


def _require_natural(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SplitError(f"{name} must be an integer, got {value!r}")
    if value < 0:
        raise SplitError(f"{name} must not be negative, got {value}")
    return value


def split_grade(grade: Grade, weights: Mapping[str, int]) -> Grade:
    """RULES §2: dividing between two or more occupants is a model; a sole
    occupant of the whole device keeps the device's grade; never improves."""
    occupants = sum(1 for w in weights.values() if w > 0)
    return worst((grade, Grade.ModelBased)) if occupants >= 2 else grade


def split(total_uj: int, weights: Mapping[str, int], grade: Grade) -> list[Share]:
    """Split a device total among occupants by largest remainder.

    Each occupant gets floor(total × w / Σw); the leftover µJ go one at a time
    to the largest remainders (total × w) mod Σw, ties to the smallest id.
    Shares come back in occupant order and always sum to `total_uj`.
    """
    _require_natural("total_uj", total_uj)
    if not weights:
        raise SplitError("no occupants to split between")
    for occupant, weight in weights.items():
        if not isinstance(occupant, str) or not occupant:
            raise SplitError(f"occupant ids must be non-empty strings, got {occupant!r}")
        _require_natural(f"weight of {occupant!r}", weight)
    weight_sum = sum(weights.values())
    if weight_sum == 0:
        raise SplitError("weights sum to 0: nothing to split by")

    occupants = sorted(weights)
    floors = {o: total_uj * weights[o] // weight_sum for o in occupants}
    leftover = total_uj - sum(floors.values())
    by_remainder = sorted(occupants, key=lambda o: (-(total_uj * weights[o] % weight_sum), o))
    for occupant in by_remainder[:leftover]:
        floors[occupant] += 1

    share_grade = split_grade(grade, weights)
    return [Share(o, floors[o], share_grade) for o in occupants]


def with_unallocated(capacity: int, occupants: Mapping[str, int]) -> dict[str, int]:
    """Weights for a device: its occupants plus the explicit `unallocated`
    remainder, so that every window total is fully accounted (RULES §2)."""
    held = sum(occupants.values())
    if UNALLOCATED in occupants:
        raise SplitError(f"{UNALLOCATED!r} is reserved for the unoccupied remainder")
    if held > capacity:
        raise SplitError(f"occupants hold {held} of a device with capacity {capacity}")
    weights = dict(occupants)
    if capacity > held:
        weights[UNALLOCATED] = capacity - held
    return weights


# Unit helpers: the only conversions between hardware units and ours.

def mj_to_uj(mj: int) -> int:
    return mj * 1000


def mw_to_uw(mw: int) -> int:
    return mw * 1000


def mean_uw(uj: int | None, duration_ns: int) -> int | None:
    """Mean power over a window, floored. None when the window has no figure
    or no duration: an empty window has no rate, and never a rate of 0."""
    if uj is None or duration_ns <= 0:
        return None
    return uj * NS_PER_S // duration_ns


def format_uj(uj: int | None) -> str:
    """Human energy for tables: J, kJ, MJ, then kWh from 1 kWh (3.6 MJ) up, three
    decimals; below 1 J every digit down to the µJ, so a small figure is never
    shown as 0.000 J. Display only; never parsed back."""
    if uj is None:
        return "—"
    if uj < 1_000_000:
        return f"{uj / 1_000_000:.6f}".rstrip("0").ljust(5, "0") + " J" if uj else "0 J"
    joules = uj / 1_000_000
    for unit, size in (("kWh", 3_600_000), ("MJ", 1_000_000), ("kJ", 1000)):
        if joules >= size:
            return f"{joules / size:.3f} {unit}"
    return f"{joules:.3f} J"


def format_uw(uw: int | None) -> str:
    if uw is None:
        return "—"
    return f"{uw / 1_000_000:.1f} W"
