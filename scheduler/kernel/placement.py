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

from bisect import insort
from collections.abc import Callable
from dataclasses import dataclass, replace

from protos.energy import MDEV_PER_DEVICE

from .fast.freeindex import FreeIndex
from .reasons import Placement, Reason
from .snapshot import SCALAR_FIELDS, ClaimSpec, DeviceShare, Resources, Worker, WorkerLoad


# members read on every decision, bound once (reasons.py says why)
_ADMISSIBLE, _EXCLUSIVE = Reason.ADMISSIBLE, Placement.PLACEMENT_EXCLUSIVE


def _matching(worker: Worker, req: Resources) -> list[int]:
    return [i for i, d in enumerate(worker.devices) if not req.gpu_types or d.device_type in req.gpu_types]


def pick_devices(worker: Worker, load: WorkerLoad, req: Resources) -> tuple[DeviceShare, ...] | None:
    if not req.gpu_mdev:
        return ()
    devices = worker.devices  # kept in id order
    used = load.device_used or (0,) * len(devices)
    if req.gpu_types:  # a device of another type counts as full
        used = tuple(u if d.device_type in req.gpu_types else MDEV_PER_DEVICE for u, d in zip(used, devices))
    if req.gpu_mdev < MDEV_PER_DEVICE:
        # least free mdev that fits = the most used up to the limit; index()
        # finds the first device so used, the lowest id (C-level, per admission)
        most = max(filter((MDEV_PER_DEVICE - req.gpu_mdev).__ge__, used), default=None)
        return None if most is None else (DeviceShare(devices[used.index(most)].device_id, req.gpu_mdev),)
    free = [d.device_id for d, u in zip(devices, used) if not u]
    wanted = req.gpu_mdev // MDEV_PER_DEVICE
    if len(free) < wanted:
        return None
    return tuple(DeviceShare(d, MDEV_PER_DEVICE) for d in free[:wanted])


def placeable_mdev(worker: Worker, load: WorkerLoad, req: Resources) -> int:
    """The GPU figure an explanation shows as available for this request: the
    most one device can give a fraction, or the wholly free devices."""
    used = load.device_used or (0,) * len(worker.devices)
    matching = _matching(worker, req)
    if 0 < req.gpu_mdev < MDEV_PER_DEVICE:
        return max((MDEV_PER_DEVICE - used[i] for i in matching), default=0)
    return MDEV_PER_DEVICE * sum(1 for i in matching if used[i] == 0)


def _device_test(req: Resources) -> Callable[[Worker, WorkerLoad], bool] | None:
    """Whether `pick_devices` would find devices, without building them:
    without a type filter, one C-level pass over the per-device usage. None
    when the request takes no GPU."""
    if not req.gpu_mdev:
        return None
    if req.gpu_types:
        return lambda worker, load: pick_devices(worker, load, req) is not None
    if req.gpu_mdev < MDEV_PER_DEVICE:
        most_used = MDEV_PER_DEVICE - req.gpu_mdev
        # a worker without devices has no fitting one: the default exceeds most_used
        return lambda worker, load: (min(load.device_used or (0,) * len(worker.devices), default=MDEV_PER_DEVICE)
                                     <= most_used)
    wanted = req.gpu_mdev // MDEV_PER_DEVICE
    return lambda worker, load: (load.device_used.count(0) if load.device_used else len(worker.devices)) >= wanted


def reasoner(spec: ClaimSpec) -> Callable[[Worker, WorkerLoad], Reason]:
    """The worker's reason code for this claim, ADMISSIBLE when it takes it.
    The request's figures are read once here, not per worker: explain judges
    every worker against one claim."""
    req = spec.resources
    cpu, memory, disk, types = req.cpu_millis, req.memory_mb, req.disk_mb, set(req.gpu_types)
    exclusive = spec.placement is _EXCLUSIVE
    devices_fit = _device_test(req)

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
        return _ADMISSIBLE
    return reason


def check_worker(worker: Worker, load: WorkerLoad, spec: ClaimSpec) -> tuple[Reason, tuple[DeviceShare, ...] | None]:
    """The worker's reason code and the devices it would give (None unless
    it takes the claim)."""
    reason = reasoner(spec)(worker, load)
    return reason, pick_devices(worker, load, spec.resources) if reason is Reason.ADMISSIBLE else None


def place(workers, loads, free_index: FreeIndex, spec: ClaimSpec) -> tuple[str, tuple[DeviceShare, ...]] | None:
    """Best fit through the free index: the first passing worker at or after
    the request's mdev whose free cpu, memory and disk cover it."""
    req, reason = spec.resources, reasoner(spec)
    for worker_id in free_index.covering(req.gpu_mdev, req.cpu_millis, req.memory_mb, req.disk_mb):
        worker, load = workers[worker_id], loads[worker_id]
        if reason(worker, load) is _ADMISSIBLE:
            return worker_id, pick_devices(worker, load, req)
    return None


# Loads and the index, maintained by apply().

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
    exclusive = spec.placement is _EXCLUSIVE
    return WorkerLoad(load.cpu_millis + sign * req.cpu_millis, load.memory_mb + sign * req.memory_mb,
                      load.disk_mb + sign * req.disk_mb, used, tuple(active),
                      load.exclusive + (sign if exclusive else 0))


@dataclass(frozen=True, slots=True)
class FieldFigure:
    field: str
    requested: int
    capacity: int
    reserved: int
    available_before: int
    available_after: int  # negative where it would not fit
    shortfall: int


def field_figures(worker: Worker, load: WorkerLoad, req: Resources) -> tuple[FieldFigure, ...]:
    """Per-field figures for an explanation, and `concurrency` last. On a
    worker that lacks a requested GPU type the GPU figures count all its
    devices: the type is the reason (the explanation says so), not a shortage."""
    capacity = worker.capacity
    if req.gpu_types and not set(req.gpu_types) <= set(capacity.gpu_types):
        req = replace(req, gpu_types=())
    figures = []
    for name in SCALAR_FIELDS:
        requested, cap = getattr(req, name), getattr(capacity, name)
        reserved = load.gpu_mdev if name == "gpu_mdev" else getattr(load, name)
        before = placeable_mdev(worker, load, req) if name == "gpu_mdev" else max(0, cap - reserved)
        figures.append(FieldFigure(name, requested, cap, reserved, before, before - requested,
                                   max(0, requested - before)))
    limit = worker.max_concurrency
    if limit:
        before = max(0, limit - len(load.active))
        figures.append(FieldFigure("concurrency", 1, limit, len(load.active), before, before - 1,
                                   max(0, 1 - before)))
    return tuple(figures)
