"""Issue 21 item 3: no answer exceeds a default client's 4 MiB at 100,000
claims and 10,000 workers. Builds that state directly (the kernel's records
and `rebuild`, then the service's state: filling it through gRPC would take
an hour here), puts it behind a real Engine, and asks the real servicers
in-process, as an operator, at the default page sizes: Workers,
PreemptionOrder, ReclamationOrder, List, Splits (after one window per GPU,
with a gap on each host), Explain (a claim no worker can take: every worker
row) and Plan (1,000 claims that would wait). Each answer's encoded size is
what a client receives; every page of Workers and of List is sized, the
others' first pages (the largest: totals come with the first).

Two shapes of the same 100,000 claims: spread (10 a worker) and piled (all on
one worker: tiny CPU-only claims, where best fit puts them, the issue's
abuse). Ids are 128 characters, the longest a name may be (kernel/limits.py).

Usage: .venv/bin/python bench/answers.py [--claims 100000] [--workers 10000] [--id-chars 128]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from protos.energy import Grade
from protos.pool.v1 import claims_pb2, ops_pb2, types_pb2
from scheduler.kernel import (Claim, ClaimSpec, ClusterState, ConfigApplied, Device, DeviceShare, Resources, Tenant,
                              Worker, apply, rebuild)
from scheduler.kernel.fast.pmap import PMap
from scheduler.kernel.reasons import ClaimState
from scheduler.service import principal
from scheduler.service.claims import ClaimsServicer
from scheduler.service.config import SchedulerConfig
from scheduler.service.engine import Engine
from scheduler.service.ops import OperationsServicer
from scheduler.service.state import ServiceState
from scheduler.service.windows.batch import Windows

LIMIT = 4 << 20   # a default grpc client's max_receive_message_length
GPUS = 8
TENANTS = 10


class Agents:
    """What OperationsServicer reads of the agents: every host live, its GPUs metered."""

    def __init__(self, workers: list[Worker]) -> None:
        self.meters = {w.worker_id: [types_pb2.DeviceMeter(device_id=d.device_id, kind=types_pb2.GPU,
                                                           device_type=d.device_type, meter=types_pb2.NVML_ENERGY,
                                                           grade=types_pb2.GRADE_HW_SHUNT) for d in w.devices]
                       for w in workers}

    def live(self, host: str) -> bool:
        return True


def name(prefix: str, n: int, chars: int) -> str:
    """An id of exactly `chars` characters (a name may have 128)."""
    return f"{prefix}-{n:08d}".ljust(chars, "x")[:chars] if chars >= len(prefix) + 9 else f"{prefix}{n}"


def build(claims: int, workers: int, chars: int, piled: bool) -> tuple[ServiceState, list[Worker]]:
    tenants = [Tenant("root", guarantee_uj=10**18, guarantee_mdev=1000 * GPUS * workers),
               *(Tenant(name(f"t{t}", t, min(chars, 64)), "root", guarantee_uj=10**17,
                        guarantee_mdev=1000 * GPUS * workers // TENANTS) for t in range(TENANTS))]
    hosts = [Worker(name("host", w, chars), cpu_millis=10**9, memory_mb=10**9, disk_mb=10**9,
                    devices=tuple(Device(name(f"GPU{w}-{g}", g, chars), "NVIDIA H200") for g in range(GPUS)))
             for w in range(workers)]
    state = apply(ClusterState(), ConfigApplied(tuple(tenants)))
    made = {}
    for i in range(claims):
        tenant = tenants[1 + i % TENANTS].name
        worker = hosts[0] if piled else hosts[i % workers]
        key = f"{tenant}/{name('claim', i, chars)}"
        devices = () if piled else (DeviceShare(worker.devices[i // workers % GPUS].device_id, 100),)
        spec = ClaimSpec(key, tenant, Resources(cpu_millis=1, gpu_mdev=0 if piled else 100), estimate_uj=1000,
                         priority=i % 3)
        made[key] = Claim(spec, i + 1, state=ClaimState.ADMITTED, hold_uj=1000, hold_grade=Grade.Estimator,
                          worker=worker.worker_id, devices=devices, admitted_seq=i + 1, admitted_ns=10**18 + i)
    wide = f"{tenants[1].name}/{name('wide', 0, chars)}"   # pending: no worker has the GPUs it asks for
    made[wide] = Claim(ClaimSpec(wide, tenants[1].name, Resources(gpu_mdev=1000 * (GPUS + 1)), estimate_uj=1),
                       claims + 1)
    kernel = rebuild(state._replace(workers=PMap({w.worker_id: w for w in hosts}), claims=PMap(made),
                                    next_seq=claims + 2, next_admit_seq=claims + 1))
    ids = list(made)
    return ServiceState(kernel, claim_seq=PMap({k: i + 1 for i, k in enumerate(ids)}),
                        submitted_by=PMap(dict.fromkeys(ids, "operator"))), hosts


def windows(engine: Engine, state: ServiceState, hosts: list[Worker]) -> None:
    """One window per GPU, split among its holders, and a gap on each host's
    first GPU: a row per share, a total per device, a gap record per host."""
    occupants = engine.observed.holders
    for seq, host in enumerate(hosts, 1):
        held = occupants(state.kernel, host.worker_id)
        columns: dict[str, list] = {k: [] for k in Windows._fields if k not in ("gap", "lost")}
        gaps, lost = [], []
        for g, device in enumerate(host.devices):
            shares = held.get(device.device_id, {}) or {"unallocated": 1000}
            columns["device"].append(device.device_id)
            columns["seq"].append(g + 1)
            columns["start_ns"].append(10**18)
            columns["end_ns"].append(10**18 + 10**8)
            gap = g == 0
            columns["uj"].append(None if gap else 10**6)
            columns["grade"].append("HwShunt")
            columns["shares"].append(0 if gap else len(shares))
            if not gap:
                for occupant in shares:
                    columns["occupant"].append(occupant)
                    columns["share_uj"].append(10**6 // len(shares))
                    columns["share_grade"].append("HwShunt")
            gaps.append("agent_restart" if gap else None)
            lost.append(1 if gap else 0)
        engine.observed.fold(state.kernel, host.worker_id, Windows(**columns, gap=gaps, lost=lost), seq)


async def sizes(claims: int, workers: int, chars: int, piled: bool) -> dict[str, tuple[int, str]]:
    began = time.monotonic()
    state, hosts = build(claims, workers, chars, piled)
    config = SchedulerConfig(tuple(state.kernel.tree.nodes[n] for n in state.kernel.tree.order))   # defaults
    engine = Engine(config.splits_retention)
    engine._latest = state   # as replay leaves it (Engine.replayed), without writing 200,000 receipts first
    windows(engine, state, hosts)
    engine._committed = engine._view(len(hosts) + claims + 1)
    engine.ready = True
    ops = OperationsServicer(engine, Agents(hosts), config.limits)
    claims_servicer = ClaimsServicer(engine, config.limits)
    print(f"  state built in {time.monotonic() - began:.0f} s", flush=True)
    out: dict[str, tuple[int, str]] = {}

    def note(rpc: str, answer, where: str) -> None:
        size = answer.ByteSize()
        if size > out.get(rpc, (0, ""))[0]:
            out[rpc] = (size, where)

    principal.set_caller(principal.Principal("operator", "operator"))
    token, page = "", 0
    while True:   # every page
        answer = await ops.Workers(ops_pb2.WorkersRequest(page_token=token), None)
        note("Workers", answer, f"page {page}")
        token, page = answer.next_page_token, page + 1
        if not token:
            break
    note("PreemptionOrder", await ops.PreemptionOrder(ops_pb2.PreemptionOrderRequest(), None), "page 0")
    note("ReclamationOrder", await ops.ReclamationOrder(ops_pb2.ReclamationOrderRequest(), None), "page 0")
    note("Splits", await ops.Splits(ops_pb2.SplitsRequest(), None), "page 0, with the totals")
    token, page = "", 0
    while True:
        answer = await claims_servicer.List(claims_pb2.ListClaimsRequest(page_token=token), None)
        note("List", answer, f"page {page}")
        token, page = answer.next_page_token, page + 1
        if not token or page >= 20:   # every page is the same size: 20 show it
            break
    tenant = state.kernel.tree.order[1]
    big = claims_pb2.SubmitRequest(claim_id=name("wide", 0, chars), tenant=tenant, estimate_uj=1,
                                   resources=types_pb2.Resources(gpu_mdev=1000 * (GPUS + 1)))
    plan = await claims_servicer.Plan(claims_pb2.PlanRequest(claims=[
        claims_pb2.SubmitRequest(claim_id=name("wide", i, chars), tenant=tenant, estimate_uj=1,
                                 resources=big.resources) for i in range(1000)]), None)
    note("Plan", plan, "1,000 claims that would wait")
    wide = next(c for c in state.kernel.claims.values() if c.state is ClaimState.PENDING)
    note("Explain", await ops.Explain(ops_pb2.ExplainRequest(claim_id=wide.claim_id.split("/", 1)[1],
                                                             tenant=wide.tenant), None),
         "a claim no worker can take")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=10_000)
    parser.add_argument("--id-chars", type=int, default=128)
    args = parser.parse_args()
    worst = 0
    for piled in (False, True):
        print(f"{args.claims:,} claims on {args.workers:,} workers ({GPUS} GPUs each), "
              f"{'piled on one worker' if piled else 'spread, 10 a worker'}, ids of {args.id_chars} characters:",
              flush=True)
        for rpc, (size, where) in asyncio.run(sizes(args.claims, args.workers, args.id_chars, piled)).items():
            worst = max(worst, size)
            print(f"  {rpc:<38} {size / 2**20:7.3f} MiB  ({where}){'  OVER 4 MiB' if size > LIMIT else ''}")
    print(f"largest answer: {worst / 2**20:.3f} MiB (limit 4 MiB)")


if __name__ == "__main__":
    main()
