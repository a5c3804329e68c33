"""Derived estimates (RULES §7): the largest eligible (not Estimator-graded)
observation of a declared work class, graded ModelBased, once at least
`required` eligible observations exist (never fewer than 2); and a claim's
hold (RULES §3), the larger of its declared and its derived estimate."""

from __future__ import annotations

from dataclasses import dataclass

from protos.energy import Grade

from .reasons import ErrorCode, KernelError
from .snapshot import ClaimSpec, ClassStats, ClusterState
from .fast.members import ESTIMATOR

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


def hold_for(state: ClusterState, spec: ClaimSpec) -> tuple[int, Grade] | KernelError:
    """The hold: the larger of the declared estimate (Estimator) and the work
    class's derived estimate (ModelBased); on a tie the better grade. A class
    still without enough history is refused unless the claim declares its own
    estimate too (that is how a class earns its first observations). A
    tenant not in the tree has no hold."""
    if spec.tenant not in state.tree.nodes:
        return KernelError(ErrorCode.UNKNOWN_TENANT, "tenant", f"tenant {spec.tenant!r} is not in the tree")
    if not spec.work_class and spec.estimate_uj is not None:
        return spec.estimate_uj, ESTIMATOR  # the usual claim: no class to weigh
    figures = []
    if spec.work_class:
        estimate = usable_estimate(state, spec.work_class)
        if isinstance(estimate, Estimate):
            figures.append((estimate.estimate_uj, -Grade.ModelBased))
        elif spec.estimate_uj is None or estimate.code is not ErrorCode.EMPTY_WORK_CLASS:
            return estimate
    if spec.estimate_uj is not None:
        figures.append((spec.estimate_uj, -ESTIMATOR))
    uj, grade = max(figures)
    return uj, Grade(-grade)
