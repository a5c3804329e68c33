"""Read-only views the operations API shows: the tenant tree with usage,
and workers with capacity, reserved and available (Loom's worker-capacity)."""

from __future__ import annotations

from dataclasses import dataclass

from protos.energy import Grade, sum_graded

from .snapshot import SCALAR_FIELDS, ClusterState, Device, Resources, Tenant, Worker, admitted_ids


@dataclass(frozen=True, slots=True)
class TenantView:
    tenant: Tenant
    usage_uj: int
    usage_mdev: int
    borrowed_uj: int     # usage above guarantee
    measured_uj: int     # measured energy of the subtree: open claims and this period's settled ones
    measured_grade: Grade | None


def tenants(state: ClusterState) -> tuple[TenantView, ...]:
    """Parents before children. Measured figures are summed here, on
    demand, from the claims (an operator query, not a decision)."""
    tree = state.tree
    parts: dict[str, list[tuple[int, Grade]]] = {}
    for claim in (state.claims[c] for c in admitted_ids(state) + list(state.settled)):
        uj, grade = (claim.measured_uj, claim.measured_grade) if claim.claim_id not in state.settled else (
            claim.settled_uj, claim.settled_grade)
        if grade is None:
            continue  # nothing measured
        for name in tree.path(claim.tenant):
            parts.setdefault(name, []).append((uj, grade))
    out = []
    for name in tree.order:
        u, node = state.usage[name], tree.nodes[name]
        total, grade = sum_graded(parts.get(name, ()))
        out.append(TenantView(node, u.energy.total, u.devices.total, max(0, u.energy.total - node.guarantee_uj), total,
                              grade))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class WorkerView:
    worker: Worker
    capacity: Resources
    reserved: Resources
    available: Resources
    active_claims: tuple[str, ...]
    exclusive: bool
    gpus: tuple[tuple[Device, int], ...] = ()  # each GPU with the milli-devices reserved on it


def workers(state: ClusterState) -> tuple[WorkerView, ...]:
    out = []
    for worker_id in sorted(state.workers):
        worker, load = state.workers[worker_id], state.loads[worker_id]
        capacity = worker.capacity
        reserved = Resources(load.cpu_millis, load.memory_mb, load.disk_mb, load.gpu_mdev)
        # free milli-GPUs in all; what one request can use is explain's figure
        available = Resources(*(max(0, getattr(capacity, f) - getattr(reserved, f)) for f in SCALAR_FIELDS))
        used = load.device_used or (0,) * len(worker.devices)
        out.append(WorkerView(worker, capacity, reserved, available, tuple(load.active), bool(load.exclusive),
                              tuple(zip(worker.devices, used))))
    return tuple(out)
