"""Builders shared by the kernel tests: small clusters from short specs."""

from __future__ import annotations

from functools import reduce

from scheduler.kernel import (ClaimSpec, ClaimSubmitted, ClusterState, ConfigApplied, Device, Resources, Tenant,
                              Worker, WorkerRegistered, apply, schedule, submit)


def cluster(tenants: list[Tenant], workers: list[Worker], **config) -> ClusterState:
    events = [ConfigApplied(tuple(tenants), **config)] + [WorkerRegistered(w) for w in workers]
    return reduce(apply, events, ClusterState())


def flat(total: int = 10**9, **leaves: int) -> list[Tenant]:
    """A root with `total` µJ and 8 GPUs' worth of mdev, and leaf guarantees."""
    return [Tenant("root", guarantee_uj=total, guarantee_mdev=8000),
            *(Tenant(name, "root", guarantee_uj=g, guarantee_mdev=8000 // max(1, len(leaves))) for name, g in leaves.items())]


def gpus(worker_id: str, count: int, kind: str = "H200", **fields) -> Worker:
    devices = tuple(Device(f"{worker_id}-gpu{i}", kind) for i in range(count))
    return Worker(worker_id, **{"cpu_millis": 64000, "memory_mb": 512000, "disk_mb": 10**6, **fields}, devices=devices)


def spec(claim_id: str, tenant: str = "a", estimate: int | None = 10, **fields) -> ClaimSpec:
    resources = {k: fields.pop(k) for k in ("cpu_millis", "memory_mb", "disk_mb", "gpu_mdev", "gpu_types")
                 if k in fields}
    return ClaimSpec(claim_id, tenant, Resources(**resources), estimate_uj=estimate, **fields)


def submitted(state: ClusterState, *specs: ClaimSpec) -> ClusterState:
    for s in specs:
        event = submit(state, s)
        assert isinstance(event, ClaimSubmitted), event
        state = apply(state, event)
    return state


def run(state: ClusterState, now_ns: int = 0):
    decision = schedule(state, now_ns)
    return decision.state, dict(decision.reasons), decision
