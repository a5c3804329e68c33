"""Host capacity (RULES §5): measured from psutil and the metered GPUs,
operator overrides from the configuration win, field by field."""

from __future__ import annotations

import psutil

from agent.meters.base import GPU, DeviceInfo
from protos.energy import MDEV_PER_DEVICE
from protos.pool.v1 import types_pb2

MIB = 1024 * 1024


def measured(devices: list[DeviceInfo], disk_path: str) -> dict:
    gpus = [d for d in devices if d.kind == GPU]
    return {
        "cpu_millis": max(1000, (psutil.cpu_count(logical=True) or 0) * 1000),
        "memory_mb": psutil.virtual_memory().available // MIB,
        "disk_mb": psutil.disk_usage(disk_path).free // MIB,
        "gpu_mdev": len(gpus) * MDEV_PER_DEVICE,
        "gpu_types": sorted({d.device_type for d in gpus}),
        "max_concurrency": 0,
    }


def host_capacity(devices: list[DeviceInfo], overrides: dict, disk_path: str = "/") -> dict:
    """Measured capacity with every override the operator set applied."""
    fields = measured(devices, disk_path)
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return fields


def as_proto(fields: dict) -> types_pb2.Capacity:
    resources = types_pb2.Resources(**{k: v for k, v in fields.items() if k != "max_concurrency"})
    return types_pb2.Capacity(resources=resources, max_concurrency=fields["max_concurrency"])
