"""Whether a worker has the devices a request asks for, without picking
them: one pass over its per-device usage, for placement's reasoner, which
asks it of every worker a placement or an explanation visits. Its plain
twin is `placement.pick_devices(...) is not None`, and
tests/kernel/test_placement.py holds them equal."""

from __future__ import annotations

from collections.abc import Callable

from protos.energy import MDEV_PER_DEVICE

from ..loads import WorkerLoad
from ..snapshot import Resources, Worker


def device_test(req: Resources) -> Callable[[Worker, WorkerLoad], bool] | None:
    """The test for a GPU request without a type filter; None for one with
    a filter (ask pick_devices)."""
    if req.gpu_types:
        return None
    if req.gpu_mdev < MDEV_PER_DEVICE:
        most_used = MDEV_PER_DEVICE - req.gpu_mdev
        # a worker without devices has no fitting one: the default exceeds most_used
        return lambda worker, load: (min(load.device_used or (0,) * len(worker.devices), default=MDEV_PER_DEVICE)
                                     <= most_used)
    wanted = req.gpu_mdev // MDEV_PER_DEVICE
    return lambda worker, load: (load.device_used.count(0) if load.device_used else len(worker.devices)) >= wanted
