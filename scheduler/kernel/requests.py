"""Requests about one claim (RULES §3, §10): a submission validated and
queued, progress reported, a claim settled or released. Each answers the
event that carries it out, or the KernelError that refuses it: refused,
nothing changes.
"""

from __future__ import annotations

from protos.energy import MDEV_PER_DEVICE

from .estimates import hold_for
from .events import ClaimSubmitted, Progress, Released
from .limits import (MAX_GANG_SIZE, MAX_GPU_TYPE_CHARS, MAX_GPU_TYPES, claim_never_fits, name_error,
                     own_name)
from .reasons import ClaimState, ErrorCode, KernelError
from .snapshot import Claim, ClaimSpec, ClusterState, admitted_ids

INT32 = range(-(2 ** 31), 2 ** 31)


def _invalid(field: str, message: str) -> KernelError:
    return KernelError(ErrorCode.INVALID_CLAIM, field, message)


def _spec_error(spec: ClaimSpec) -> KernelError | None:
    req = spec.resources
    for field, value in (("claim_id", spec.claim_id), ("gang_id", spec.gang_id), ("work_class", spec.work_class)):
        # a key: the tenant's own name for it, the tenant before a '/' (docs/RULES.md §names)
        problem = name_error(own_name(value, spec.tenant)) if value or field == "claim_id" else None
        if problem:
            return _invalid(field, f"{field} {problem}")
    for name in ("cpu_millis", "memory_mb", "disk_mb", "gpu_mdev"):
        if getattr(req, name) < 0:
            return _invalid(f"resources.{name}", f"{name} must not be negative")
    if req.gpu_mdev >= MDEV_PER_DEVICE and req.gpu_mdev % MDEV_PER_DEVICE:
        return _invalid("resources.gpu_mdev", f"{req.gpu_mdev} mdev: at or above 1000 it must be whole GPUs")
    if req.gpu_types and not req.gpu_mdev:
        return _invalid("resources.gpu_types", "gpu_types needs a positive gpu_mdev")
    if list(req.gpu_types) != sorted(set(req.gpu_types)) or "" in req.gpu_types:
        return _invalid("resources.gpu_types", "gpu_types must be distinct non-empty names, sorted")
    if len(req.gpu_types) > MAX_GPU_TYPES or any(len(t) > MAX_GPU_TYPE_CHARS for t in req.gpu_types):
        return _invalid("resources.gpu_types",
                        f"at most {MAX_GPU_TYPES} gpu_types of at most {MAX_GPU_TYPE_CHARS} characters each")
    if spec.estimate_uj is None and not spec.work_class:
        return _invalid("estimate_uj", "a claim needs estimate_uj, work_class or both")
    if spec.estimate_uj is not None and spec.estimate_uj <= 0:
        return _invalid("estimate_uj", "estimate_uj must be positive: a claim that holds nothing is not admitted")
    if spec.priority not in INT32:
        return _invalid("priority", "priority must fit in 32 bits")
    if spec.gang_id and not 1 <= spec.gang_size <= MAX_GANG_SIZE:
        return _invalid("gang_size", f"a gang member needs 1 <= gang_size <= {MAX_GANG_SIZE}")
    if not spec.gang_id and spec.gang_size:
        return _invalid("gang_id", "gang_size without gang_id")
    return None


def submit(state: ClusterState, spec: ClaimSpec, now_ns: int = 0) -> ClaimSubmitted | Claim | KernelError:
    """The event that queues a claim at `now_ns`; the existing Claim for an
    identical resubmission; or why it is refused."""
    error = _spec_error(spec)
    if error:
        return error
    existing = state.claims.get(spec.claim_id)
    if existing is not None:
        if existing.spec == spec:
            return existing
        return KernelError(ErrorCode.DUPLICATE_CLAIM, "claim_id",
                           f"claim {own_name(spec.claim_id, spec.tenant)!r} exists with another request")
    if state.tree is None or spec.tenant not in state.tree.nodes:
        return KernelError(ErrorCode.UNKNOWN_TENANT, "tenant", f"tenant {spec.tenant!r} is not in the tree")
    hold = hold_for(state, spec)
    if isinstance(hold, KernelError):
        return hold
    never = claim_never_fits(state, spec, hold[0])
    if never:
        return KernelError(ErrorCode.CLAIM_NEVER_FITS, never[0], never[1])
    if spec.gang_id:
        error = _gang_error(state, spec)
        if error:
            return error
    return ClaimSubmitted(spec, state.next_seq, now_ns)


def _gang_error(state: ClusterState, spec: ClaimSpec) -> KernelError | None:
    """A member joins a gang still waiting, of its own tenant and size; a gang
    id with admitted members still open cannot start a new gang."""
    members = [state.claims[m] for m in state.gangs.get(spec.gang_id, ())]
    if any(m.spec.gang_size != spec.gang_size for m in members):
        return _invalid("gang_size", f"gang {own_name(spec.gang_id, spec.tenant)!r} was declared with another size")
    if any(m.tenant != spec.tenant for m in members):
        return _invalid("gang_id", f"gang {own_name(spec.gang_id, spec.tenant)!r} belongs to another tenant; "
                                   "a gang's members share one")
    if len(members) >= spec.gang_size:
        return _invalid("gang_id", f"gang {own_name(spec.gang_id, spec.tenant)!r} already has its {spec.gang_size} members")
    if not members and any(state.claims[c].spec.gang_id == spec.gang_id for c in admitted_ids(state)):
        return _invalid("gang_id", f"gang {own_name(spec.gang_id, spec.tenant)!r} was admitted and has open members; "
                                   "a gang id is reused only once all its members are settled")
    return None


def progress(state: ClusterState, claim_id: str, completed_units: int) -> Progress | None | KernelError:
    """The event that records a claim's cumulative completed units; None when
    it already has that count (nothing to record: a report sent again, after
    an answer that was lost, changes nothing); or why not."""
    claim = state.claims.get(claim_id)
    if claim is None:
        return KernelError(ErrorCode.UNKNOWN_CLAIM, "claim_id", f"no claim {claim_id!r}")
    if claim.state not in (ClaimState.PENDING, ClaimState.ADMITTED):
        return KernelError(ErrorCode.CLAIM_NOT_OPEN, "claim_id",
                           f"claim {own_name(claim_id, claim.tenant)!r} is {claim.state.name}")
    if completed_units < claim.completed_units:
        return KernelError(ErrorCode.PROGRESS_REGRESSED, "completed_units",
                           f"completed units are cumulative: {completed_units} < {claim.completed_units}")
    if completed_units == claim.completed_units:
        return None
    return Progress(claim_id, completed_units)


def settle(state: ClusterState, claim_id: str, now_ns: int, kind: type = Released, **extra) -> Released | KernelError:
    """Released (or Preempted/Reclaimed) with the claim's actual: its
    measured shares, graded by the worst; the hold when nothing was measured."""
    claim = state.claims.get(claim_id)
    if claim is None:
        return KernelError(ErrorCode.UNKNOWN_CLAIM, "claim_id", f"no claim {claim_id!r}")
    if claim.state not in (ClaimState.PENDING, ClaimState.ADMITTED) or (
            kind is not Released and claim.state is not ClaimState.ADMITTED):
        return KernelError(ErrorCode.CLAIM_NOT_OPEN, "claim_id",
                           f"claim {own_name(claim_id, claim.tenant)!r} is {claim.state.name}")
    actual_uj, grade = claim.actual
    return kind(claim_id, actual_uj, grade, claim.completed_units, now_ns, **extra)


def release(state: ClusterState, claim_id: str, now_ns: int) -> Released | KernelError:
    return settle(state, claim_id, now_ns)
