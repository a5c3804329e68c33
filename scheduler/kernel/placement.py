"""Placement on workers (RULES §5, after Loom's resource admission).

A worker takes a claim only if, in this order: it is eligible (live, offers
every requested GPU type) → it is not cordoned by an operator → for an exclusive claim it is empty → it holds no
exclusive claim → reserved + requested fits every field → its active count is
below max_concurrency (0 = unlimited). GPUs are picked as concrete devices: a
fractional request takes the fitting device with the least free mdev (then
id); a whole-GPU request takes the lowest-id wholly free devices.

Choice among workers is best fit: the passing worker with the fewest free
milli-devices, then the fewest free cpu_millis, memory, disk, then the
smallest id. The `free_index` (sorted by exactly that key, see freeindex.py)
makes this a bisect plus a scan that skips whole blocks of workers that
cannot cover the request, instead of a pass over every worker.
"""

from __future__ import annotations

from collections.abc import Callable

from protos.energy import MDEV_PER_DEVICE

from .fast.devices import device_test
from .fast.freeindex import FreeIndex
from .reasons import Placement, Reason
from .loads import WorkerLoad
from .snapshot import ClaimSpec, DeviceShare, Resources, Worker
from .fast.members import ADMISSIBLE, EXCLUSIVE


def pick_devices(worker: Worker, load: WorkerLoad, req: Resources) -> tuple[DeviceShare, ...] | None:
    if not req.gpu_mdev:
        return ()
    devices = worker.devices  # kept in id order
    used = load.device_used or (0,) * len(devices)
    if req.gpu_types:  # a device of another type counts as full
        used = tuple(u if d.device_type in req.gpu_types else MDEV_PER_DEVICE for u, d in zip(used, devices))
    if req.gpu_mdev < MDEV_PER_DEVICE:
        # least free mdev that fits = the most used up to the limit; index()
        # finds the first device so used, the lowest id
        most = max((u for u in used if u <= MDEV_PER_DEVICE - req.gpu_mdev), default=None)
        return None if most is None else (DeviceShare(devices[used.index(most)].device_id, req.gpu_mdev),)
    free = [d.device_id for d, u in zip(devices, used) if not u]
    wanted = req.gpu_mdev // MDEV_PER_DEVICE
    if len(free) < wanted:
        return None
    return tuple(DeviceShare(d, MDEV_PER_DEVICE) for d in free[:wanted])


def reasoner(spec: ClaimSpec) -> Callable[[Worker, WorkerLoad], Reason]:
    """The worker's reason code for this claim, ADMISSIBLE when it takes it.
    The request's figures are read once here, not per worker: explain judges
    every worker against one claim."""
    req = spec.resources
    cpu, memory, disk, types = req.cpu_millis, req.memory_mb, req.disk_mb, set(req.gpu_types)
    exclusive = spec.placement is EXCLUSIVE
    # whether pick_devices would find devices (without building them: fast/devices.py)
    devices_fit = (device_test(req) or (lambda worker, load: pick_devices(worker, load, req) is not None)
                   if req.gpu_mdev else None)

    def reason(worker: Worker, load: WorkerLoad) -> Reason:
        if not worker.live or (types and not types <= {d.device_type for d in worker.devices}):
            return Reason.WORKER_INELIGIBLE
        if worker.cordoned:
            return Reason.WORKER_CORDONED
        if exclusive and load.active:
            return Reason.EXCLUSIVE_WORKER_BUSY
        if load.exclusive:
            return Reason.WORKER_HAS_EXCLUSIVE_TASK
        if (load.cpu_millis + cpu > worker.cpu_millis or load.memory_mb + memory > worker.memory_mb
                or load.disk_mb + disk > worker.disk_mb or (devices_fit and not devices_fit(worker, load))):
            return Reason.RESOURCE_RESERVATION_UNAVAILABLE
        if worker.max_concurrency and len(load.active) >= worker.max_concurrency:
            return Reason.WORKER_CONCURRENCY_REACHED
        return ADMISSIBLE
    return reason


def check_worker(worker: Worker, load: WorkerLoad, spec: ClaimSpec) -> tuple[Reason, tuple[DeviceShare, ...] | None]:
    """The worker's reason code and the devices it would give (None unless
    it takes the claim)."""
    reason = reasoner(spec)(worker, load)
    return reason, pick_devices(worker, load, spec.resources) if reason is ADMISSIBLE else None


def place(workers, loads, free_index: FreeIndex, spec: ClaimSpec) -> tuple[str, tuple[DeviceShare, ...]] | None:
    """Best fit through the free index: the first passing worker at or after
    the request's mdev whose free cpu, memory and disk cover it."""
    req, reason = spec.resources, reasoner(spec)
    for worker_id in free_index.covering(req.gpu_mdev, req.cpu_millis, req.memory_mb, req.disk_mb):
        worker, load = workers[worker_id], loads[worker_id]
        if reason(worker, load) is ADMISSIBLE:
            return worker_id, pick_devices(worker, load, req)
    return None
