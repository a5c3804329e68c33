"""RULES §10: an admitted claim bound to the devices an outside launcher
(Slurm) gave its job.

Pool places a claim on a worker and picks its devices (§2, §5); a launcher
that runs the job then picks the job's devices itself, on the same worker.
The agent charges each device's energy to the claims recorded on it, so the
record must follow what the launcher picked. `bind(state, claim_id,
device_ids)` is that rule:

- only an admitted claim is bound, to devices of its own worker, as many as
  it holds (whole GPUs: one per 1000 mdev; a fraction: one device);
- each named device must have room for the claim once the claim's own
  reservation is lifted and every *unbound* claim on it is moved away: a
  bound claim is where its job runs and is never moved, so a device held by
  one is a conflict (BIND_CONFLICT);
- the unbound claims moved away are placed again on the worker by the §2
  device pick; if one cannot be, the bind is refused and nothing moves;
- binding a bound claim to the devices it has changes nothing (None).

The event records every claim whose devices change, so `apply` needs no rule
of its own: it moves reservations as recorded."""

from __future__ import annotations

from protos.energy import MDEV_PER_DEVICE

from .events import Binding, ClaimBound
from .limits import own_name
from .loads import adjust
from .placement import pick_devices
from .reasons import ClaimState, ErrorCode, KernelError
from .snapshot import ClusterState, DeviceShare


def _refused(code: ErrorCode, field: str, message: str) -> KernelError:
    return KernelError(code, field, message)


def bind(state: ClusterState, claim_id: str, device_ids: tuple[str, ...]) -> ClaimBound | None | KernelError:
    claim = state.claims.get(claim_id)
    if claim is None:
        return _refused(ErrorCode.UNKNOWN_CLAIM, "claim_id", f"no claim {claim_id!r}")
    if claim.state is not ClaimState.ADMITTED:
        return _refused(ErrorCode.CLAIM_NOT_ADMITTED, "claim_id",
                        f"claim {own_name(claim_id, claim.tenant)!r} is {claim.state.name}: "
                        "only an admitted claim is bound to devices")
    worker = state.workers[claim.worker]
    mdev = claim.spec.resources.gpu_mdev
    wanted = 1 if 0 < mdev < MDEV_PER_DEVICE else mdev // MDEV_PER_DEVICE
    if len(set(device_ids)) != len(device_ids) or len(device_ids) != wanted:
        return _refused(ErrorCode.INVALID_ARGUMENT, "device_ids",
                        f"claim {own_name(claim_id, claim.tenant)!r} holds {mdev} mdev: name {wanted} distinct device(s), "
                        f"not {len(device_ids)}")
    known = {d.device_id for d in worker.devices}
    for device_id in device_ids:
        if device_id not in known:
            return _refused(ErrorCode.BIND_CONFLICT, "device_ids",
                            f"device {device_id!r} is not one of worker {worker.worker_id!r}'s")
    share = mdev if mdev < MDEV_PER_DEVICE else MDEV_PER_DEVICE
    target = tuple(DeviceShare(d, share) for d in sorted(device_ids))
    if claim.bound and tuple(sorted(claim.devices)) == target:
        return None
    load = adjust(worker, state.loads[worker.worker_id], claim_id, claim.spec, claim.devices, -1)
    moved = []
    for other_id in load.active:
        other = state.claims[other_id]
        if any(d.device_id in device_ids for d in other.devices):
            if other.bound:
                device = next(d.device_id for d in other.devices if d.device_id in device_ids)
                return _refused(ErrorCode.BIND_CONFLICT, "device_ids",
                                f"device {device!r} is bound to claim {other_id!r}, whose job runs there")
            moved.append(other)
    for other in moved:
        load = adjust(worker, load, other.claim_id, other.spec, other.devices, -1)
    load = adjust(worker, load, claim_id, claim.spec, target, 1)
    bindings = [Binding(claim_id, target, True)]
    for other in moved:
        devices = pick_devices(worker, load, other.spec.resources)
        if devices is None:
            return _refused(ErrorCode.BIND_CONFLICT, "device_ids",
                            f"claim {other.claim_id!r} on those devices cannot be moved elsewhere on "
                            f"worker {worker.worker_id!r}")
        load = adjust(worker, load, other.claim_id, other.spec, devices, 1)
        bindings.append(Binding(other.claim_id, devices, False))
    for i, device in enumerate(worker.devices):
        if load.device_used and load.device_used[i] > MDEV_PER_DEVICE:
            return _refused(ErrorCode.BIND_CONFLICT, "device_ids",
                            f"device {device.device_id!r} has no room for claim "
                            f"{own_name(claim_id, claim.tenant)!r}")
    return ClaimBound(worker.worker_id, tuple(bindings))
