"""Idle reclamation (RULES §8). The check order is normative and each
refusal is final: (1) holds nothing → NOTHING_HELD; (2) observed for less than
the window, or the window has no figure → NO_VERDICT; (3) graded Estimator →
UNKNOWN, whatever the value; (4) mean µW strictly below the threshold → IDLE,
else BUSY.

The threshold is per whole device of a kind, scaled by the fraction held: a
claim holding GPUs is judged on Σ threshold(type) × mdev / 1000 over its
devices; one holding no GPU on threshold("cpu") × its cpu_millis / the host's.
A kind with no threshold contributes 0, and nothing is strictly below 0, so
the default policy reclaims nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from protos.energy import MDEV_PER_DEVICE, Grade, mean_uw

from .requests import settle
from .events import Reclaimed
from .reasons import IdleVerdict
from .snapshot import Claim, ClusterState, IdlePolicy, admitted_ids


@dataclass(frozen=True, slots=True)
class Observation:
    """A claim's energy over one window, as the caller measured it."""

    start_ns: int
    end_ns: int
    uj: int | None  # None: the window spans a gap or has no reading
    grade: Grade


@dataclass(frozen=True, slots=True)
class ClaimVerdict:
    claim_id: str
    verdict: IdleVerdict
    mean_uw: int | None
    grade: Grade | None
    threshold_uw: int
    held_mdev: int
    observed_ns: int
    admitted_ns: int


def threshold_uw(state: ClusterState, claim: Claim, policy: IdlePolicy) -> int:
    if claim.devices:
        types = {d.device_id: d.device_type for d in state.workers[claim.worker].devices}
        return sum(policy.threshold(types.get(d.device_id, "")) * d.mdev for d in claim.devices) // MDEV_PER_DEVICE
    host_cpu = state.workers[claim.worker].cpu_millis
    if not host_cpu:
        return 0
    return policy.threshold("cpu") * claim.spec.resources.cpu_millis // host_cpu


def verdict(state: ClusterState, claim: Claim, observation: Observation | None, policy: IdlePolicy) -> ClaimVerdict:
    held = sum(d.mdev for d in claim.devices)
    threshold = threshold_uw(state, claim, policy)
    observed = observation.end_ns - observation.start_ns if observation else 0
    grade = observation.grade if observation else None
    mean = mean_uw(observation.uj, observed) if observation else None

    def out(v: IdleVerdict) -> ClaimVerdict:
        return ClaimVerdict(claim.claim_id, v, mean, grade, threshold, held, max(0, observed), claim.admitted_ns)

    if not held and not claim.spec.resources.cpu_millis:
        return out(IdleVerdict.NOTHING_HELD)
    if observation is None or observed < policy.window_ns or mean is None:
        return out(IdleVerdict.NO_VERDICT)
    if grade is Grade.Estimator:
        return out(IdleVerdict.UNKNOWN)
    return out(IdleVerdict.IDLE if mean < threshold else IdleVerdict.BUSY)


def idle_verdicts(state: ClusterState, observations: Mapping[str, Observation],
                  policy: IdlePolicy | None = None) -> tuple[ClaimVerdict, ...]:
    """A verdict for every admitted claim, by claim id; the policy in force
    unless one is given."""
    policy = state.idle if policy is None else policy
    admitted = sorted(admitted_ids(state))
    return tuple(verdict(state, state.claims[c], observations.get(c), policy) for c in admitted)


def reclamation_order(verdicts: tuple[ClaimVerdict, ...]) -> tuple[str, ...]:
    """IDLE claims only: lowest mean µW first, then longest held, then id."""
    idle = [v for v in verdicts if v.verdict is IdleVerdict.IDLE]
    return tuple(v.claim_id for v in sorted(idle, key=lambda v: (v.mean_uw, v.admitted_ns, v.claim_id)))



def reclaim(state: ClusterState, order: tuple[str, ...], now_ns: int) -> tuple[Reclaimed, ...]:
    """Settle every claim of a reclamation order as RECLAIMED."""
    return tuple(settle(state, claim_id, now_ns, Reclaimed) for claim_id in order)
