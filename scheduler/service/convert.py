"""Kernel records <-> v1 messages. The kernel's enums share names and values
with the wire enums, so an enum crosses as its integer. A claim's or gang's
key crosses as its id, with the tenant beside it (names.py)."""

from __future__ import annotations

from protos.energy import MDEV_PER_DEVICE, GapReason, Grade
from protos.pool.v1 import agent_pb2, claims_pb2, ops_pb2, types_pb2
from scheduler.kernel import (Claim, ClaimSpec, ClaimVerdict, Device, Estimate, Explanation, Placement,
                              PreemptionPlan, Reason, Resources, TenantView, Tier, Worker, WorkerView, tier)
from scheduler.service.config import WorkerOverride
from scheduler.service.errors import Refused
from scheduler.service.names import bare
from scheduler.service.windows.projections import GapRecord, SplitRow


def known(enum, value: int, field: str) -> int:
    """`value` if the wire enum `enum` names it; else INVALID_ARGUMENT naming the
    field (protobuf keeps an unknown enum number as a plain int)."""
    if value not in enum.values():
        raise Refused("INVALID_ARGUMENT", f"{field}: {value} is not a {enum.DESCRIPTOR.name} value")
    return value


def grade(g: Grade | None) -> int:
    return int(g) if g is not None else types_pb2.GRADE_UNSPECIFIED


# -- claims -------------------------------------------------------------------

def resources(r: Resources) -> types_pb2.Resources:
    return types_pb2.Resources(cpu_millis=r.cpu_millis, memory_mb=r.memory_mb, disk_mb=r.disk_mb,
                               gpu_mdev=r.gpu_mdev, gpu_types=r.gpu_types)


def spec_from(request: claims_pb2.SubmitRequest) -> ClaimSpec:
    r = request.resources
    return ClaimSpec(
        claim_id=request.claim_id, tenant=request.tenant,
        resources=Resources(r.cpu_millis, r.memory_mb, r.disk_mb, r.gpu_mdev, tuple(sorted(set(r.gpu_types)))),
        placement=Placement(known(types_pb2.Placement, request.placement, "placement")),
        estimate_uj=request.estimate_uj if request.HasField("estimate_uj") else None,
        work_class=request.work_class, priority=request.priority,
        gang_id=request.gang_id, gang_size=request.gang_size)


def submit_request(spec: ClaimSpec) -> claims_pb2.SubmitRequest:
    request = claims_pb2.SubmitRequest(
        claim_id=bare(spec.claim_id), tenant=spec.tenant, gang_id=bare(spec.gang_id), gang_size=spec.gang_size,
        resources=resources(spec.resources), placement=int(spec.placement), work_class=spec.work_class,
        priority=spec.priority)
    if spec.estimate_uj is not None:
        request.estimate_uj = spec.estimate_uj
    return request


def claim_status(claim: Claim, ledger_seq: int, reason: Reason, queue_position: int) -> claims_pb2.ClaimStatus:
    """`reason` is the claim's headline (kernel.headline), `queue_position` its place if pending."""
    return claims_pb2.ClaimStatus(
        claim_id=bare(claim.claim_id), tenant=claim.tenant, state=int(claim.state), reason=int(reason),
        hold_uj=claim.hold_uj, hold_grade=grade(claim.hold_grade),
        measured_uj=claim.settled_uj if claim.settled_ns else claim.measured_uj,
        measured_grade=grade(claim.settled_grade if claim.settled_ns else claim.measured_grade),
        completed_units=claim.completed_units, overrun=claim.overrun, worker=claim.worker,
        devices_mdev={d.device_id: d.mdev for d in claim.devices}, ledger_seq=ledger_seq,
        gang_id=bare(claim.spec.gang_id), priority=claim.spec.priority, borrowed=claim.borrowed,
        request=submit_request(claim.spec), submitted_ns=claim.submitted_ns, admitted_ns=claim.admitted_ns,
        ended_ns=claim.settled_ns, queue_position=queue_position, borrowed_uj=claim.borrowed_uj, bound=claim.bound)


# -- agents -------------------------------------------------------------------

def worker_from(request: agent_pb2.RegisterRequest, override: WorkerOverride | None) -> Worker:
    r = request.capacity.resources
    o = override or WorkerOverride()
    gpus = tuple(sorted((Device(d.device_id, d.device_type) for d in request.devices
                         if d.kind == types_pb2.GPU), key=lambda d: d.device_id))
    return Worker(request.host_id, _wins(o.cpu_millis, r.cpu_millis), _wins(o.memory_mb, r.memory_mb),
                  _wins(o.disk_mb, r.disk_mb), gpus, _wins(o.max_concurrency, request.capacity.max_concurrency))


def _wins(operator: int | None, reported: int) -> int:
    """Operator overrides win over what the agent reports."""
    return reported if operator is None else operator


def capacity(worker: Worker) -> types_pb2.Capacity:
    return types_pb2.Capacity(resources=resources(worker.capacity), max_concurrency=worker.max_concurrency)


# -- operations ---------------------------------------------------------------

def tenant_node(v: TenantView) -> ops_pb2.TenantNode:
    t = v.tenant
    node = ops_pb2.TenantNode(name=t.name, parent=t.parent, weight=t.weight, guarantee_uj=t.guarantee_uj,
                              guarantee_mdev=t.guarantee_mdev, usage_uj=v.usage_uj, usage_mdev=v.usage_mdev,
                              borrowed_uj=v.borrowed_uj, measured_uj=v.measured_uj,
                              measured_grade=grade(v.measured_grade))
    if t.borrow_limit_uj is not None:
        node.borrow_limit_uj = t.borrow_limit_uj
    if t.lend_limit_uj is not None:
        node.lend_limit_uj = t.lend_limit_uj
    return node


def worker_status(v: WorkerView, live: bool, meters: list[types_pb2.DeviceMeter], cap: int) -> ops_pb2.WorkerStatus:
    """`cap`: at most this many of its claim ids, the first in id order; the rest counted."""
    return ops_pb2.WorkerStatus(
        worker=v.worker.worker_id, capacity=capacity(v.worker), reserved=resources(v.reserved),
        available=resources(v.available), active_claims=map(bare, v.active_claims[:cap]),
        active_claims_omitted=max(0, len(v.active_claims) - cap), live=live, devices=meters,
        exclusive=v.exclusive, cordoned=v.worker.cordoned,
        gpus=[ops_pb2.GpuFree(device_id=d.device_id, device_type=d.device_type, used_mdev=used,
                              free_mdev=max(0, MDEV_PER_DEVICE - used)) for d, used in v.gpus])


def explanation(e: Explanation, tenant: str) -> ops_pb2.Explanation:
    """`tenant`: the explained claim's."""
    out = ops_pb2.Explanation(claim_id=bare(e.claim_id), tenant=tenant, state=int(e.state), reason=int(e.reason),
                              queue_position=e.queue_position, worker=e.worker,
                              devices_mdev={d.device_id: d.mdev for d in e.devices}, gang_member=bare(e.gang_member),
                              gpu_types=e.gpu_types, bound=e.bound, workers_omitted=e.workers_omitted)
    for c in e.checks:
        check = out.checks.add(step=int(c.step), ok=c.ok, evaluated=c.evaluated, node=c.node,
                               guarantee=c.guarantee, usage=c.usage, hold=c.hold, surplus=c.surplus,
                               grade=grade(c.grade), detail=c.detail, reason=int(c.reason))
        if c.limit is not None:
            check.limit = c.limit
    for w in e.workers:
        out.workers.add(worker=w.worker, ok=w.ok, reason=int(w.reason), gpu_types=w.gpu_types, detail=w.detail, fields=[
            ops_pb2.FieldFigure(field=f.field, requested=f.requested, capacity=f.capacity, reserved=f.reserved,
                                available_before=f.available_before, available_after=f.available_after,
                                shortfall=f.shortfall)
            for f in w.fields])
    return out


def split_row(r: SplitRow) -> ops_pb2.SplitRow:
    return ops_pb2.SplitRow(tenant=r.tenant, claim_id=bare(r.claim_id), worker=r.worker, device_id=r.device_id,
                            start_ns=r.start_ns, end_ns=r.end_ns, uj=r.uj, grade=grade(Grade[r.grade]))


def gap(g: GapRecord) -> ops_pb2.Gap:
    return ops_pb2.Gap(worker=g.worker, device_id=g.device_id, start_ns=g.start_ns, end_ns=g.end_ns,
                       reason=GapReason[g.reason] if g.reason in GapReason.__members__ else 0,
                       lost_windows=g.lost_windows)


def preemption(plan: PreemptionPlan) -> ops_pb2.PreemptionOrderResponse:
    return ops_pb2.PreemptionOrderResponse(
        order=[ops_pb2.Victim(claim_id=bare(v.claim_id), tenant=v.tenant, tier=int(v.tier), measured_uj=v.measured_uj,
                              completed_units=v.completed_units, priority=v.priority, admitted_seq=v.admitted_seq)
               for v in plan.order],
        victims=map(bare, plan.victims), reason=int(plan.reason))


def claim_verdict(v: ClaimVerdict, tenant: str) -> ops_pb2.ClaimVerdict:
    """`tenant`: the claim's."""
    out = ops_pb2.ClaimVerdict(claim_id=bare(v.claim_id), tenant=tenant, verdict=int(v.verdict), grade=grade(v.grade),
                               threshold_uw=v.threshold_uw, held_mdev=v.held_mdev, observed_ns=v.observed_ns)
    if v.mean_uw is not None:
        out.mean_uw = v.mean_uw
    return out


def estimate(e: Estimate) -> ops_pb2.EstimateResponse:
    out = ops_pb2.EstimateResponse(work_class=e.work_class, grade=grade(e.grade), observations=e.observations,
                                   excluded_estimator=e.excluded_estimator, eligible=e.eligible,
                                   required=e.required)
    if e.estimate_uj is not None:
        out.estimate_uj = e.estimate_uj
    return out


def planned_victim(victim: Claim, by: Claim) -> claims_pb2.PlannedVictim:
    """A claim a planned admission would preempt, with why it was chosen (RULES §6)."""
    why = (f"holds capacity borrowed beyond its tenant's guarantee, which {by.tenant!r} takes back"
           if victim.borrowed else f"outranked in priority ({by.spec.priority} > {victim.spec.priority}) "
           f"within {victim.tenant!r}")
    measured = tier(victim) is Tier.MEASURED
    why += (f"; measured: {victim.measured_uj} µJ for {victim.completed_units} units, worst per unit first"
            if measured else "; unmeasured: lowest priority, most recently admitted first")
    return claims_pb2.PlannedVictim(claim_id=bare(victim.claim_id), tenant=victim.tenant, for_claim=bare(by.claim_id),
                                    why=why,
                                    tier=int(tier(victim)), measured_uj=victim.measured_uj,
                                    completed_units=victim.completed_units, priority=victim.spec.priority)
