"""What the open claims on each worker reserve (RULES §5), and the free
index's entry for a worker: both maintained by `apply` (transitions.py) as
claims are admitted and settled, and recomputed by `rebuild`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from protos.energy import MDEV_PER_DEVICE

from .reasons import Placement
from .snapshot import Claim, ClaimSpec, DeviceShare, Worker
from .fast.members import EXCLUSIVE
from .fast.held import Held, held, with_id, without_id


class WorkerLoad(NamedTuple):
    """What the open claims on one worker reserve. `device_used` is aligned
    with `Worker.devices`; `active` holds their ids, sorted (fast/held.py: a
    tuple while few, else a persistent sequence, so that one claim more or
    less does not copy every id on a worker holding tens of thousands)."""

    cpu_millis: int = 0
    memory_mb: int = 0
    disk_mb: int = 0
    device_used: tuple[int, ...] = ()
    active: Held = ()
    exclusive: int = 0

    @property
    def gpu_mdev(self) -> int:
        return sum(self.device_used)


def free_key(worker: Worker, load: WorkerLoad) -> tuple[int, int, int, int, str]:
    """The index entry: free (mdev, cpu, memory, disk) and the id."""
    return (MDEV_PER_DEVICE * len(worker.devices) - load.gpu_mdev, worker.cpu_millis - load.cpu_millis,
            worker.memory_mb - load.memory_mb, worker.disk_mb - load.disk_mb, worker.worker_id)


def adjust(worker: Worker, load: WorkerLoad, claim_id: str, spec: ClaimSpec,
           devices: tuple[DeviceShare, ...], sign: int) -> WorkerLoad:
    """A load with one claim's reservation added (sign 1) or removed (-1)."""
    req = spec.resources
    used = load.device_used or (0,) * len(worker.devices)
    if devices:
        used = list(used)
        for device_id, mdev in devices:
            for i, device in enumerate(worker.devices):
                if device.device_id == device_id:  # a device gone on re-registration holds nothing
                    used[i] += sign * mdev
                    break
        used = tuple(used)
    active = with_id(load.active, claim_id) if sign > 0 else without_id(load.active, claim_id)
    exclusive = spec.placement is EXCLUSIVE
    return WorkerLoad(load.cpu_millis + sign * req.cpu_millis, load.memory_mb + sign * req.memory_mb,
                      load.disk_mb + sign * req.disk_mb, used, active,
                      load.exclusive + (sign if exclusive else 0))


def device_used(worker: Worker, claims: Iterable[Claim]) -> tuple[int, ...]:
    """What `claims` hold of each of the worker's devices, aligned with
    `Worker.devices` (a device a claim names that the worker no longer has
    holds nothing)."""
    used = dict.fromkeys((d.device_id for d in worker.devices), 0)
    for claim in claims:
        for device_id, mdev in claim.devices:
            if device_id in used:
                used[device_id] += mdev
    return tuple(used.values())


def load_of(worker: Worker, claims: Iterable[Claim]) -> WorkerLoad:
    """The load of the open `claims` on `worker`, from scratch: what `adjust`
    one claim at a time must add up to (rebuild uses this)."""
    claims = list(claims)
    cpu = memory = disk = exclusive = 0
    for claim in claims:
        req = claim.spec.resources
        cpu, memory, disk = cpu + req.cpu_millis, memory + req.memory_mb, disk + req.disk_mb
        exclusive += claim.spec.placement is EXCLUSIVE
    return WorkerLoad(cpu, memory, disk, device_used(worker, claims), held(c.claim_id for c in claims), exclusive)
