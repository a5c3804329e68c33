"""The Operations service: the tree, workers, explain, splits, preemption and
reclamation order, estimates, and the ledger's head, export and witnesses.

Every read serves the committed state (committed.py); Reclaim decides on the latest."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import defaultdict
from itertools import islice

from protos.energy import Grade, sum_graded
from protos.pool.v1 import ops_pb2, ops_pb2_grpc
from scheduler import kernel
from scheduler.ledger.witness import WitnessRejected
from scheduler.ledger.writer import GroupCommitWriter
from scheduler.service import convert, names, pages
from scheduler.service.config import Limits
from scheduler.service.agents import AgentServicer
from scheduler.service.claims import subtree
from scheduler.service.engine import Engine, LedgerFailed
from scheduler.service.errors import Refused, abort, checked, guarded, not_ready
from scheduler.service.principal import caller
from scheduler.service.state import ServiceState
from scheduler.service.windows.projections import Observed

EXPORT_CHUNK = 1 << 20   # bytes of whole receipts per LedgerChunk
U64 = (1 << 64) - 1


class Total:
    """µJ, worst grade and unaccounted ns over a selection of split rows and gaps."""

    def __init__(self) -> None:
        self.unaccounted_ns, self.lost_windows = 0, 0
        self.rows: list[tuple[int, Grade]] = []   # (µJ, grade) of each row

    def measured(self, uj: int, grade: Grade) -> None:
        self.rows.append((uj, grade))

    def figures(self) -> dict[str, int]:
        """The sums as a DeviceTotal or TenantTotal carries them (the rows' µJ
        and worst grade, protos.energy.sum_graded), each at most the largest
        uint64, whatever the rows a replayed ledger holds (a sum of uint64
        fields can exceed it; protobuf would refuse to encode it)."""
        uj, grade = sum_graded(self.rows)
        return {"uj": min(uj, U64), "grade": convert.grade(grade), "unaccounted_ns": min(self.unaccounted_ns, U64),
                "lost_windows": min(self.lost_windows, U64)}


DEVICES_SENT = 10**19   # a Splits page token's device position once every device total was sent


class OperationsServicer(ops_pb2_grpc.OperationsServicer):
    def __init__(self, engine: Engine, agents: AgentServicer, limits: Limits = Limits()) -> None:
        self.engine, self.agents, self.limits = engine, agents, limits

    @property
    def _writer(self) -> GroupCommitWriter:
        assert self.engine.writer is not None
        return self.engine.writer

    @guarded
    async def Tenants(self, request, context):
        state = self.engine.read().state
        start = state.epoch_ns + state.period_index * state.period_ns if state.period_ns else 0
        return ops_pb2.TenantsResponse(tenants=[convert.tenant_node(v) for v in kernel.tenants(state)],
                                       period_start_ns=start, period_ns=state.period_ns)

    @guarded
    async def Workers(self, request, context):
        size = pages.page_size(request.page_size, self.limits)
        views = sorted(kernel.workers(self.engine.read().state), key=lambda v: v.worker.worker_id)
        [page], token = pages.slices(request.page_token, (views,), size)
        return ops_pb2.WorkersResponse(workers=[self._worker_status(v) for v in page], next_page_token=token)

    def _worker_status(self, view: kernel.WorkerView) -> ops_pb2.WorkerStatus:
        host = view.worker.worker_id
        return convert.worker_status(view, self.agents.live(host), self.agents.meters.get(host, []),
                                     self.limits.page_size)

    @guarded
    async def Explain(self, request, context):
        state = self.engine.read().state
        key = names.resolve(state, request.claim_id, request.tenant, caller())
        return convert.explanation(checked(kernel.explain(state, key, time.time_ns(), self.limits.page_size)),
                                   state.claims[key].tenant)

    @guarded
    async def Splits(self, request, context):
        """Rows, gaps and device totals a page at a time (at most page_size
        of each); tenant totals on the first page. Device totals are one per
        device with a row or a gap: 80,000 at 10,000 hosts of 8 GPUs, 21 MiB
        on one page (bench/answers.py), so they are paged too; a page past
        the last device total says so in its token (DEVICES_SENT) and sums
        nothing."""
        size = pages.page_size(request.page_size, self.limits)
        committed = self.engine.read()
        tenants = subtree(committed.state, request.tenant)
        start_rows, start_gaps, start_devices = pages.positions(request.page_token, 3)
        observed = committed.projections
        selection = (tenants, request.since_ns, request.device_id)
        rows = list(islice(committed.splits(*selection, start_rows), size + 1))
        gaps = list(islice(committed.gaps(*selection, start_gaps), size + 1))
        answer = ops_pb2.SplitsResponse(
            rows=[convert.split_row(r) for _, r in rows[:size]], gaps=[convert.gap(g) for _, g in gaps[:size]])
        end_devices = DEVICES_SENT
        if start_devices != DEVICES_SENT:
            # the totals cover every page: the tenants' come with the first, the devices' a page at a time
            totals: dict[str, Total] = defaultdict(Total)
            devices: dict[tuple[str, str], Total] = defaultdict(Total)
            for _, row in committed.splits(*selection):
                totals[row.tenant].measured(row.uj, Grade[row.grade])
                devices[row.worker, row.device_id].measured(row.uj, Grade[row.grade])
            for _, g in committed.gaps(*selection):
                span = g.end_ns - g.start_ns
                for tenant in (g.tenants if tenants is None else g.tenants & tenants):
                    totals[tenant].unaccounted_ns += span
                if tenants is None:
                    totals[""].unaccounted_ns += span   # the unallocated remainder is unknown in a gap too
                devices[g.worker, g.device_id].unaccounted_ns += span
                devices[g.worker, g.device_id].lost_windows += g.lost_windows
            if not request.page_token:
                answer.totals.extend(ops_pb2.TenantTotal(tenant=t, **{k: v for k, v in total.figures().items()
                                                                      if k != "lost_windows"})
                                     for t, total in sorted(totals.items()))
            keys = sorted(devices)[start_devices:start_devices + size]
            answer.devices.extend(ops_pb2.DeviceTotal(worker=w, device_id=d, **devices[w, d].figures())
                                  for w, d in keys)
            if start_devices + size < len(devices):
                end_devices = start_devices + size
        more = len(rows) > size or len(gaps) > size or end_devices != DEVICES_SENT
        answer.next_page_token = pages.next_positions(
            (rows[size][0] if len(rows) > size else observed.rows_dropped + len(observed.rows),
             gaps[size][0] if len(gaps) > size else observed.gaps_dropped + len(observed.gap_records),
             end_devices), more)
        return answer

    @guarded
    async def PreemptionOrder(self, request, context):
        size = pages.page_size(request.page_size, self.limits)
        state = self.engine.read().state
        key = names.resolve(state, request.for_claim_id, request.for_tenant, caller()) if request.for_claim_id \
            else None
        plan = checked(kernel.preemption_order(state, key, time.time_ns()))
        (order, victims), token = pages.slices(request.page_token, (plan.order, plan.victims), size)
        answer = convert.preemption(dataclasses.replace(plan, order=tuple(order), victims=tuple(victims)))
        answer.next_page_token = token
        return answer

    def verdicts(self) -> tuple[kernel.ClaimVerdict, ...]:
        """Every open admitted claim's idle verdict on the committed state (what the metrics show)."""
        committed = self.engine.read()
        return self._verdicts(committed.state, committed.projections, committed.length)

    @staticmethod
    def _verdicts(state: kernel.ClusterState, observed: Observed, below: int) -> tuple[kernel.ClaimVerdict, ...]:
        """Idle verdicts on `state`, from the windows of receipts below seq `below`."""
        window = state.idle.window_ns
        admitted = kernel.admitted_ids(state)
        observations = {c: o for c in admitted if (o := observed.observation(state, c, window, below))}
        return kernel.idle_verdicts(state, observations)

    @guarded
    async def ReclamationOrder(self, request, context):
        size = pages.page_size(request.page_size, self.limits)
        committed = self.engine.read()
        verdicts = self._verdicts(committed.state, committed.projections, committed.length)
        (page, order), token = pages.slices(request.page_token, (verdicts, kernel.reclamation_order(verdicts)), size)
        claims = committed.state.claims
        return ops_pb2.ReclamationOrderResponse(verdicts=[convert.claim_verdict(v, claims[v.claim_id].tenant)
                                                          for v in page], order=map(names.bare, order),
                                                window_ns=committed.state.idle.window_ns, next_page_token=token)

    @guarded
    async def Reclaim(self, request, context):
        """The reclamation order, or the claims named of it: each is settled
        once. Naming them makes a second sending safe (ops.proto). A name
        nobody has is left alone like a claim not in the order; one several
        tenants have is AMBIGUOUS_CLAIM (names.resolve)."""
        now, order = time.time_ns(), []
        named = {}   # key -> the name given
        for given in request.claim_ids:
            try:
                named[names.resolve(self.engine.read().state, given, "", caller())] = given
            except Refused as refusal:
                if refusal.code != "UNKNOWN_CLAIM":
                    raise

        def reclaimed(latest: ServiceState) -> list[kernel.Event]:
            # on the latest state, from every window folded so far
            ranked = kernel.reclamation_order(self._verdicts(latest.kernel, self.engine.observed,
                                                             self._writer.next_seq))
            order.extend(c for c in ranked if not request.claim_ids or c in named)
            return list(kernel.reclaim(latest.kernel, tuple(order), now))

        await self.engine.decide(reclaimed, now)
        if not request.claim_ids:
            return ops_pb2.ReclaimResponse(reclaimed=map(names.bare, order))
        state = self.engine.read().state
        return ops_pb2.ReclaimResponse(reclaimed=[given for key, given in named.items() if (claim := state.claim(key))
                                                  and claim.state is kernel.ClaimState.RECLAIMED])

    @guarded
    async def Cordon(self, request, context):
        # uncordoning may admit pending claims: decided like any change (nothing, if it changes nothing)
        await self.engine.decide(lambda latest: [event] if (event := checked(kernel.cordon(
            latest.kernel, request.worker, request.cordoned))) is not None else [], time.time_ns())
        return self._worker_status(next(v for v in kernel.workers(self.engine.read().state)
                                        if v.worker.worker_id == request.worker))

    @guarded
    async def Estimate(self, request, context):
        return convert.estimate(checked(kernel.derived_estimate(self.engine.read().state, request.work_class)))

    @guarded
    async def LedgerHead(self, request, context):
        return self._info()

    def _info(self) -> ops_pb2.LedgerInfo:
        info = self._writer.steward.info()
        return ops_pb2.LedgerInfo(ledger_id=info.ledger_id, length=info.length, head=info.head,
                                  steward_key_id=info.steward_key_id, witnessed_length=info.witnessed_length)

    async def LedgerExport(self, request, context):
        if not self.engine.ready:
            await abort(self.engine, context, not_ready(self.engine))
        steward = self._writer.steward
        stop = steward.length
        if request.from_seq > stop:
            await abort(self.engine, context, Refused("INVALID_ARGUMENT", f"from_seq: {request.from_seq} is past "
                                                                          f"the ledger's length {stop}"))
        chunk: list[bytes] = []
        size = 0
        for raw in steward.read(request.from_seq, stop):
            chunk.append(raw)
            size += len(raw)
            if size >= EXPORT_CHUNK:
                yield ops_pb2.LedgerChunk(receipts=b"".join(chunk))
                chunk, size = [], 0
        if chunk:
            yield ops_pb2.LedgerChunk(receipts=b"".join(chunk))

    @guarded
    async def RecordWitness(self, request, context):
        try:
            recorded = self._writer.submit_witness(request.witness_receipt, self.engine.witness_keys,
                                                   caller().name)
        except WitnessRejected as error:
            raise Refused("WITNESS_REJECTED", f"{error.code}: {error}") from None
        if recorded is None:   # the ledger has it already (sent again): no new receipt, the head once durable
            await self.engine.durable()
            return self._info()
        try:   # shielded: a caller that goes away must not cancel the ledger's future
            await asyncio.shield(recorded)
        except Exception as exc:   # its append failed: unknown to the caller, as for any change (errors.guarded)
            raise LedgerFailed(str(exc)) from exc
        return self._info()
