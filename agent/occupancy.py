"""Apply the scheduler's occupancy to windows: each device total split among
its claims and the explicit `unallocated` remainder (RULES §2), with the
shared largest-remainder split and its grade degradation.

The occupancy in force when a window is closed applies to the whole window.
A device the scheduler has not described is wholly `unallocated` (a sole
occupant: the grade is kept). A CPU package's weights are cpu_millis against
the host's cpu_millis, as the scheduler sends them.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

from agent.windows import Window
from protos.energy import MDEV_PER_DEVICE, SplitError, split, with_unallocated
from protos.pool.v1 import agent_pb2


@dataclass(frozen=True, slots=True)
class DeviceOccupants:
    capacity: int
    occupants: dict[str, int]


class Occupancy:
    """The latest occupancy from the scheduler; safe to update from the stream thread."""

    def __init__(self, default_capacity: dict[str, int] | None = None):
        self._lock = threading.Lock()
        self._version = 0
        self._devices: dict[str, DeviceOccupants] = {}
        self._default_capacity = default_capacity or {}

    def update(self, msg: agent_pb2.Occupancy) -> None:
        devices = {d.device_id: DeviceOccupants(d.capacity, dict(d.occupants)) for d in msg.devices}
        for device_id, occ in devices.items():  # refuse a bad occupancy whole, before any of it is used
            if not any(with_unallocated(occ.capacity, occ.occupants).values()):
                raise SplitError(f"device {device_id}: capacity 0 and no occupants, nothing to split by")
        with self._lock:
            if msg.version >= self._version:
                self._version, self._devices = msg.version, devices

    def apply(self, window: Window) -> Window:
        if window.uj is None:
            return window
        with self._lock:
            version, occ = self._version, self._devices.get(window.device_id)
        if occ is None:
            capacity = self._default_capacity.get(window.device_id, MDEV_PER_DEVICE)
            occ = DeviceOccupants(capacity, {})
        shares = split(window.uj, with_unallocated(occ.capacity, occ.occupants), window.grade)
        return dataclasses.replace(window, shares=tuple(shares), occupancy_version=version)
