"""Derived estimates (RULES §7): the largest eligible (not Estimator-graded)
observation of a declared work class, graded ModelBased, once at least
`required` eligible observations exist (never fewer than 2)."""

from __future__ import annotations

from dataclasses import dataclass

from protos.energy import Grade

from .reasons import ErrorCode, KernelError
from .snapshot import ClassStats, ClusterState

MIN_REQUIRED = 2


@dataclass(frozen=True, slots=True)
class Estimate:
    work_class: str
    estimate_uj: int | None  # None below the required count
    grade: Grade | None      # ModelBased when there is an estimate
    observations: int
    excluded_estimator: int
    eligible: int
    required: int


def derived_estimate(state: ClusterState, work_class: str) -> Estimate | KernelError:
    declared = state.classes.get(work_class)
    if declared is None:
        return KernelError(ErrorCode.UNKNOWN_WORK_CLASS, "work_class", f"work class {work_class!r} is not declared")
    stats = state.class_stats.get(work_class, ClassStats())
    required = max(MIN_REQUIRED, declared.required)
    enough = stats.eligible >= required
    return Estimate(work_class, stats.max_uj if enough else None, Grade.ModelBased if enough else None,
                    stats.observations, stats.excluded_estimator, stats.eligible, required)


def usable_estimate(state: ClusterState, work_class: str) -> Estimate | KernelError:
    """The estimate a claim may rely on: an empty class is refused too."""
    estimate = derived_estimate(state, work_class)
    if isinstance(estimate, Estimate) and estimate.estimate_uj is None:
        return KernelError(ErrorCode.EMPTY_WORK_CLASS, "work_class",
                           f"work class {work_class!r} has {estimate.eligible} eligible observations "
                           f"of {estimate.required} required ({estimate.excluded_estimator} excluded as Estimator)")
    return estimate
