"""What the open claims on each worker reserve (RULES §5), and the free
index's entry for a worker: both maintained by `apply` (transitions.py) as
claims are admitted and settled, and recomputed by `rebuild`."""

from __future__ import annotations

from bisect import insort
from typing import NamedTuple

from protos.energy import MDEV_PER_DEVICE

from .reasons import Placement
from .snapshot import ClaimSpec, DeviceShare, Worker
from .fast.members import EXCLUSIVE


class WorkerLoad(NamedTuple):
    """What the open claims on one worker reserve. `device_used` is aligned
    with `Worker.devices`; `active` is sorted."""

    cpu_millis: int = 0
    memory_mb: int = 0
    disk_mb: int = 0
    device_used: tuple[int, ...] = ()
    active: tuple[str, ...] = ()
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
    active = list(load.active)
    if sign > 0:
        insort(active, claim_id)
    else:
        active.remove(claim_id)
    exclusive = spec.placement is EXCLUSIVE
    return WorkerLoad(load.cpu_millis + sign * req.cpu_millis, load.memory_mb + sign * req.memory_mb,
                      load.disk_mb + sign * req.disk_mb, used, tuple(active),
                      load.exclusive + (sign if exclusive else 0))
