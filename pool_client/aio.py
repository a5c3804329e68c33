"""The asyncio client: pool_client.Client's methods as coroutines (Watch and
LedgerExport as async iterators), with the same failover, resending,
deadlines and errors (pool_client/sync.py says how).

    from pool_client.aio import Client
    async with Client.from_context() as pool:
        status = await pool.submit(claim_id="c1", tenant="research", estimate_uj=10**9)
        async for event in pool.watch(claim_id="c1"):
            ...
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio

from pool_client import _common
from pool_client._common import RESUME_FROM_KEY, Resume, request as _request
from pool_client.calls import BY_METHOD, Rpc
from pool_client.errors import from_rpc_error
from pool_client.failover import Sent, sent, trailing
from protos.pool.v1 import claims_pb2, claims_pb2_grpc, ops_pb2, ops_pb2_grpc

class Client:
    """As pool_client.Client, for asyncio; make it inside the running event loop."""

    def __init__(self, scheduler: str | list[str], *, ca: str | None = None, cert: str | None = None,
                 key: str | None = None, tenant: str | None = None, timeout: float | None = None,
                 deadline: float | None = None, options: tuple = ()) -> None:
        self.settings = _common.settings(scheduler, ca, cert, key, tenant, timeout, deadline, options)
        self.reach = _common.Reach(self.settings)
        self.targets = self.reach.targets
        self._stubs: dict[str, tuple[grpc.aio.Channel, Any, Any]] = {}

    @classmethod
    def from_context(cls, name: str | None = None, **overrides: Any) -> Client:
        scheduler, values = _common.context_values(name, overrides)
        return cls(scheduler, **values)

    def _stub(self, address: str, service: str) -> Any:
        if address not in self._stubs:
            s = self.settings
            channel = (grpc.aio.secure_channel(address, s.credentials, options=s.options) if s.credentials
                       else grpc.aio.insecure_channel(address, options=s.options))
            self._stubs[address] = (channel, claims_pb2_grpc.ClaimsStub(channel), ops_pb2_grpc.OperationsStub(channel))
        _, claims, ops = self._stubs[address]
        return claims if service == "Claims" else ops

    async def call(self, rpc: Rpc, request: Any, timeout: float | None = None) -> Any:
        """As pool_client.Client.call."""
        if self.settings.tenant:
            request = _request(rpc, request, {}, self.settings.tenant)
        start = time.monotonic()
        deadline = start + (self.settings.deadline if timeout is None else timeout)
        resent = False
        while True:
            address = self.targets.current
            try:
                answer = await getattr(self._stub(address, rpc.service), rpc.name)(
                    request, timeout=max(0.001, deadline - time.monotonic()))
            except grpc.RpcError as error:
                wait, resent = self.reach.retry(error, address, start, deadline, rpc.resends(request), resent)
                await asyncio.sleep(wait)
                continue
            self.reach.answered()
            return answer

    async def _unary(self, method: str, given: Any, fields: dict[str, Any], timeout: float | None) -> Any:
        rpc = BY_METHOD[method]
        return await self.call(rpc, _request(rpc, given, fields, self.settings.tenant), timeout)

    async def close(self) -> None:
        for channel, _, _ in self._stubs.values():
            await channel.close()
        self._stubs.clear()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # -- Claims ------------------------------------------------------------------------
    async def submit(self, request: claims_pb2.SubmitRequest | None = None, /, *, timeout: float | None = None,
                     **fields: Any) -> claims_pb2.ClaimStatus:
        return await self._unary("submit", request, fields, timeout)

    async def submit_many(self, request: claims_pb2.SubmitManyRequest | None = None, /, *,
                          timeout: float | None = None, **fields: Any) -> claims_pb2.SubmitManyResponse:
        return await self._unary("submit_many", request, fields, timeout)

    async def progress(self, request: claims_pb2.ProgressRequest | None = None, /, *, timeout: float | None = None,
                       **fields: Any) -> claims_pb2.ClaimStatus:
        return await self._unary("progress", request, fields, timeout)

    async def release(self, request: claims_pb2.ReleaseRequest | None = None, /, *, timeout: float | None = None,
                      **fields: Any) -> claims_pb2.ClaimStatus:
        return await self._unary("release", request, fields, timeout)

    async def get(self, request: claims_pb2.GetClaimRequest | None = None, /, *, timeout: float | None = None,
                  **fields: Any) -> claims_pb2.ClaimStatus:
        return await self._unary("get", request, fields, timeout)

    async def list(self, request: claims_pb2.ListClaimsRequest | None = None, /, *, timeout: float | None = None,
                   **fields: Any) -> claims_pb2.ListClaimsResponse:
        return await self._unary("list", request, fields, timeout)

    async def list_all(self, request: claims_pb2.ListClaimsRequest | None = None, /, *,
                       timeout: float | None = None, **fields: Any) -> AsyncIterator[claims_pb2.ClaimStatus]:
        rpc = BY_METHOD["list"]
        page = _request(rpc, request, fields, self.settings.tenant)
        while True:
            answer = await self.call(rpc, page, timeout)
            for claim in answer.claims:
                yield claim
            if not answer.next_page_token:
                return
            page = _common._copy(page)
            page.page_token = answer.next_page_token

    async def plan(self, request: claims_pb2.PlanRequest | None = None, /, *, timeout: float | None = None,
                   **fields: Any) -> claims_pb2.PlanResponse:
        return await self._unary("plan", request, fields, timeout)

    async def bind(self, request: claims_pb2.BindRequest | None = None, /, *, timeout: float | None = None,
             **fields: Any) -> claims_pb2.ClaimStatus:
        return await self._unary("bind", request, fields, timeout)

    async def watch(self, request: claims_pb2.WatchRequest | None = None, /,
                    **fields: Any) -> AsyncIterator[claims_pb2.ClaimEvent]:
        """As pool_client.Client.watch: resumed after a failover or WATCH_LAGGED."""
        rpc = BY_METHOD["watch"]
        resume = Resume(_request(rpc, request, fields, self.settings.tenant))
        start = time.monotonic()
        while True:
            address = self.targets.current
            stream = self._stub(address, "Claims").Watch(resume.again())
            try:
                async for event in stream:
                    self.targets.succeeded()
                    self.reach.reached = True
                    if resume.fresh(event):
                        yield event
                return
            except grpc.RpcError as error:
                lagged = error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and \
                    (error.details() or "").startswith("WATCH_LAGGED")
                if not lagged and sent(error) is Sent.ANSWERED:
                    raise from_rpc_error(error) from None
                if lagged:
                    resume.lagged(trailing(error, RESUME_FROM_KEY))
                self.reach.give_up(error, address, time.monotonic() - start)
                await asyncio.sleep(0 if lagged else self.targets.failed(error))
            finally:
                stream.cancel()

    # -- Operations ----------------------------------------------------------------------
    async def tenants(self, request: ops_pb2.TenantsRequest | None = None, /, *, timeout: float | None = None,
                      **fields: Any) -> ops_pb2.TenantsResponse:
        return await self._unary("tenants", request, fields, timeout)

    async def workers(self, request: ops_pb2.WorkersRequest | None = None, /, *, timeout: float | None = None,
                      **fields: Any) -> ops_pb2.WorkersResponse:
        return await self._unary("workers", request, fields, timeout)

    async def explain(self, request: ops_pb2.ExplainRequest | None = None, /, *, timeout: float | None = None,
                      **fields: Any) -> ops_pb2.Explanation:
        return await self._unary("explain", request, fields, timeout)

    async def splits(self, request: ops_pb2.SplitsRequest | None = None, /, *, timeout: float | None = None,
                     **fields: Any) -> ops_pb2.SplitsResponse:
        return await self._unary("splits", request, fields, timeout)

    async def preemption_order(self, request: ops_pb2.PreemptionOrderRequest | None = None, /, *,
                               timeout: float | None = None, **fields: Any) -> ops_pb2.PreemptionOrderResponse:
        return await self._unary("preemption_order", request, fields, timeout)

    async def reclamation_order(self, request: ops_pb2.ReclamationOrderRequest | None = None, /, *,
                                timeout: float | None = None, **fields: Any) -> ops_pb2.ReclamationOrderResponse:
        return await self._unary("reclamation_order", request, fields, timeout)

    async def reclaim(self, request: ops_pb2.ReclaimRequest | None = None, /, *, timeout: float | None = None,
                      **fields: Any) -> ops_pb2.ReclaimResponse:
        return await self._unary("reclaim", request, fields, timeout)

    async def estimate(self, request: ops_pb2.EstimateRequest | None = None, /, *, timeout: float | None = None,
                       **fields: Any) -> ops_pb2.EstimateResponse:
        return await self._unary("estimate", request, fields, timeout)

    async def ledger_head(self, request: ops_pb2.LedgerHeadRequest | None = None, /, *,
                          timeout: float | None = None, **fields: Any) -> ops_pb2.LedgerInfo:
        return await self._unary("ledger_head", request, fields, timeout)

    async def ledger_export(self, request: ops_pb2.LedgerExportRequest | None = None, /, *,
                            timeout: float | None = None, **fields: Any) -> AsyncIterator[ops_pb2.LedgerChunk]:
        """The ledger's chunks; fails over before the first chunk only."""
        message = _request(BY_METHOD["ledger_export"], request, fields, None)
        start = time.monotonic()
        deadline = start + (self.settings.deadline if timeout is None else timeout)
        while True:
            address = self.targets.current
            stream = self._stub(address, "Operations").LedgerExport(message, timeout=timeout)
            try:
                head = await stream.read()
            except grpc.RpcError as error:
                if sent(error) is Sent.ANSWERED:
                    raise from_rpc_error(error) from None
                now = time.monotonic()
                self.reach.give_up(error, address, now - start)
                if now >= deadline:
                    raise from_rpc_error(error) from None
                await asyncio.sleep(min(self.targets.failed(error), max(0.0, deadline - now)))
                continue
            break
        self.targets.succeeded()
        self.reach.reached = True
        if head is grpc.aio.EOF:
            return
        yield head
        while True:
            try:
                chunk = await stream.read()
            except grpc.RpcError as error:
                raise from_rpc_error(error) from None
            if chunk is grpc.aio.EOF:
                return
            yield chunk

    async def record_witness(self, request: ops_pb2.RecordWitnessRequest | None = None, /, *,
                             timeout: float | None = None, **fields: Any) -> ops_pb2.LedgerInfo:
        return await self._unary("record_witness", request, fields, timeout)

    async def cordon(self, request: ops_pb2.CordonRequest | None = None, /, *, timeout: float | None = None,
                     **fields: Any) -> ops_pb2.WorkerStatus:
        return await self._unary("cordon", request, fields, timeout)
