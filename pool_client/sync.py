"""The blocking client: every RPC of claims.proto and ops.proto as a method.

    from pool_client import Client
    with Client("sched-a:7070,sched-b:7070", ca="ca.pem", cert="me.pem", key="me.key") as pool:
        status = pool.submit(claim_id="c1", tenant="research", estimate_uj=10**9)

A method takes the request message, or its fields as keywords, and returns
the answer message (protos/pool/v1/*_pb2.py). A refusal raises the PoolError
subclass of its code (pool_client.errors). Failover, resending and deadlines
follow pool_client/failover.py and pool_client/calls.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import grpc

from pool_client import _common
from pool_client._common import RESUME_FROM_KEY, Resume, request as _request
from pool_client.calls import BY_METHOD, Rpc
from pool_client.errors import from_rpc_error
from pool_client.failover import Sent, sent, trailing
from protos.pool.v1 import claims_pb2, claims_pb2_grpc, ops_pb2, ops_pb2_grpc

class Client:
    """A connection to a leader and its standbys.

    scheduler: "host:port", "a:7070,b:7070" or a list (a port left out is 7070);
    ca/cert/key: PEM files for mutual TLS (no ca: plaintext); tenant: filled into
    Submit/List/Watch/Splits requests that name none; timeout: seconds to reach a
    scheduler before Unreachable (default 5); deadline: each call's whole budget in
    seconds, failovers included (default 30; a method's timeout= overrides it)."""

    def __init__(self, scheduler: str | list[str], *, ca: str | None = None, cert: str | None = None,
                 key: str | None = None, tenant: str | None = None, timeout: float | None = None,
                 deadline: float | None = None, options: tuple = ()) -> None:
        self.settings = _common.settings(scheduler, ca, cert, key, tenant, timeout, deadline, options)
        self.reach = _common.Reach(self.settings)
        self.targets = self.reach.targets
        self._stubs: dict[str, tuple[grpc.Channel, Any, Any]] = {}

    @classmethod
    def from_context(cls, name: str | None = None, **overrides: Any) -> Client:
        """A client from the configuration file's context `name` (else $POOL_CONTEXT,
        else the current context); keyword arguments override the context's values."""
        scheduler, values = _common.context_values(name, overrides)
        return cls(scheduler, **values)

    # -- the machinery ---------------------------------------------------------------
    def _stub(self, address: str, service: str) -> Any:
        if address not in self._stubs:
            s = self.settings
            channel = (grpc.secure_channel(address, s.credentials, options=s.options) if s.credentials
                       else grpc.insecure_channel(address, options=s.options))
            self._stubs[address] = (channel, claims_pb2_grpc.ClaimsStub(channel), ops_pb2_grpc.OperationsStub(channel))
        _, claims, ops = self._stubs[address]
        return claims if service == "Claims" else ops

    def call(self, rpc: Rpc, request: Any, timeout: float | None = None) -> Any:
        """One unary call on the leader: sent again where failover.py and calls.py say it is safe
        (the context's tenant filled in where the request names none)."""
        if self.settings.tenant:
            request = _request(rpc, request, {}, self.settings.tenant)
        start = time.monotonic()
        deadline = start + (self.settings.deadline if timeout is None else timeout)
        resent = False
        while True:
            address = self.targets.current
            try:
                answer = getattr(self._stub(address, rpc.service), rpc.name)(
                    request, timeout=max(0.001, deadline - time.monotonic()))
            except grpc.RpcError as error:
                wait, resent = self.reach.retry(error, address, start, deadline, rpc.resends(request), resent)
                time.sleep(wait)
                continue
            self.reach.answered()
            return answer

    def _unary(self, method: str, given: Any, fields: dict[str, Any], timeout: float | None) -> Any:
        rpc = BY_METHOD[method]
        return self.call(rpc, _request(rpc, given, fields, self.settings.tenant), timeout)

    def close(self) -> None:
        for channel, _, _ in self._stubs.values():
            channel.close()
        self._stubs.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- Claims ------------------------------------------------------------------------
    def submit(self, request: claims_pb2.SubmitRequest | None = None, /, *, timeout: float | None = None,
               **fields: Any) -> claims_pb2.ClaimStatus:
        return self._unary("submit", request, fields, timeout)

    def submit_many(self, request: claims_pb2.SubmitManyRequest | None = None, /, *, timeout: float | None = None,
                    **fields: Any) -> claims_pb2.SubmitManyResponse:
        return self._unary("submit_many", request, fields, timeout)

    def progress(self, request: claims_pb2.ProgressRequest | None = None, /, *, timeout: float | None = None,
                 **fields: Any) -> claims_pb2.ClaimStatus:
        return self._unary("progress", request, fields, timeout)

    def release(self, request: claims_pb2.ReleaseRequest | None = None, /, *, timeout: float | None = None,
                **fields: Any) -> claims_pb2.ClaimStatus:
        return self._unary("release", request, fields, timeout)

    def get(self, request: claims_pb2.GetClaimRequest | None = None, /, *, timeout: float | None = None,
            **fields: Any) -> claims_pb2.ClaimStatus:
        return self._unary("get", request, fields, timeout)

    def list(self, request: claims_pb2.ListClaimsRequest | None = None, /, *, timeout: float | None = None,
             **fields: Any) -> claims_pb2.ListClaimsResponse:
        """One page; list_all() follows next_page_token."""
        return self._unary("list", request, fields, timeout)

    def list_all(self, request: claims_pb2.ListClaimsRequest | None = None, /, *, timeout: float | None = None,
                 **fields: Any) -> Iterator[claims_pb2.ClaimStatus]:
        """Every claim of every page, in claim id order."""
        rpc = BY_METHOD["list"]
        page = _request(rpc, request, fields, self.settings.tenant)
        while True:
            answer = self.call(rpc, page, timeout)
            yield from answer.claims
            if not answer.next_page_token:
                return
            page = _common._copy(page)
            page.page_token = answer.next_page_token

    def plan(self, request: claims_pb2.PlanRequest | None = None, /, *, timeout: float | None = None,
             **fields: Any) -> claims_pb2.PlanResponse:
        return self._unary("plan", request, fields, timeout)

    def bind(self, request: claims_pb2.BindRequest | None = None, /, *, timeout: float | None = None,
             **fields: Any) -> claims_pb2.ClaimStatus:
        return self._unary("bind", request, fields, timeout)

    def watch(self, request: claims_pb2.WatchRequest | None = None, /, **fields: Any) -> Iterator[claims_pb2.ClaimEvent]:
        """Events as they become durable, each claim's current status first. After a
        failover (or WATCH_LAGGED) the watch is made again and resumes: what the
        caller already saw is not delivered twice, and a change made while it was
        away arrives as the claim's current status (kind EVENT_CURRENT)."""
        rpc = BY_METHOD["watch"]
        resume = Resume(_request(rpc, request, fields, self.settings.tenant))
        start = time.monotonic()
        while True:
            address = self.targets.current
            stream = self._stub(address, "Claims").Watch(resume.again())
            try:
                for event in stream:
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
                time.sleep(0 if lagged else self.targets.failed(error))
            finally:
                stream.cancel()

    # -- Operations ----------------------------------------------------------------------
    def tenants(self, request: ops_pb2.TenantsRequest | None = None, /, *, timeout: float | None = None,
                **fields: Any) -> ops_pb2.TenantsResponse:
        return self._unary("tenants", request, fields, timeout)

    def workers(self, request: ops_pb2.WorkersRequest | None = None, /, *, timeout: float | None = None,
                **fields: Any) -> ops_pb2.WorkersResponse:
        return self._unary("workers", request, fields, timeout)

    def explain(self, request: ops_pb2.ExplainRequest | None = None, /, *, timeout: float | None = None,
                **fields: Any) -> ops_pb2.Explanation:
        return self._unary("explain", request, fields, timeout)

    def splits(self, request: ops_pb2.SplitsRequest | None = None, /, *, timeout: float | None = None,
               **fields: Any) -> ops_pb2.SplitsResponse:
        return self._unary("splits", request, fields, timeout)

    def preemption_order(self, request: ops_pb2.PreemptionOrderRequest | None = None, /, *,
                         timeout: float | None = None, **fields: Any) -> ops_pb2.PreemptionOrderResponse:
        return self._unary("preemption_order", request, fields, timeout)

    def reclamation_order(self, request: ops_pb2.ReclamationOrderRequest | None = None, /, *,
                          timeout: float | None = None, **fields: Any) -> ops_pb2.ReclamationOrderResponse:
        return self._unary("reclamation_order", request, fields, timeout)

    def reclaim(self, request: ops_pb2.ReclaimRequest | None = None, /, *, timeout: float | None = None,
                **fields: Any) -> ops_pb2.ReclaimResponse:
        return self._unary("reclaim", request, fields, timeout)

    def estimate(self, request: ops_pb2.EstimateRequest | None = None, /, *, timeout: float | None = None,
                 **fields: Any) -> ops_pb2.EstimateResponse:
        return self._unary("estimate", request, fields, timeout)

    def ledger_head(self, request: ops_pb2.LedgerHeadRequest | None = None, /, *, timeout: float | None = None,
                    **fields: Any) -> ops_pb2.LedgerInfo:
        return self._unary("ledger_head", request, fields, timeout)

    def ledger_export(self, request: ops_pb2.LedgerExportRequest | None = None, /, *, timeout: float | None = None,
                      **fields: Any) -> Iterator[ops_pb2.LedgerChunk]:
        """The ledger's chunks; fails over before the first chunk only."""
        rpc = BY_METHOD["ledger_export"]
        message = _request(rpc, request, fields, None)

        def first(channel_stub: Any, left: float) -> tuple[Any, Any]:
            stream = channel_stub.LedgerExport(message, timeout=timeout)
            return stream, next(stream, None)
        stream, head = self._first(first, timeout)
        if head is None:
            return
        yield head
        yield from stream

    def _first(self, first: Any, timeout: float | None) -> Any:
        """A server stream opened on the leader, failing over until its first message."""
        start = time.monotonic()
        deadline = start + (self.settings.deadline if timeout is None else timeout)
        while True:
            address = self.targets.current
            try:
                result = first(self._stub(address, "Operations"), deadline - time.monotonic())
            except grpc.RpcError as error:
                if sent(error) is Sent.ANSWERED:
                    raise from_rpc_error(error) from None
                now = time.monotonic()
                self.reach.give_up(error, address, now - start)
                if now >= deadline:
                    raise from_rpc_error(error) from None
                time.sleep(min(self.targets.failed(error), max(0.0, deadline - now)))
                continue
            self.targets.succeeded()
            self.reach.reached = True
            return result

    def record_witness(self, request: ops_pb2.RecordWitnessRequest | None = None, /, *,
                       timeout: float | None = None, **fields: Any) -> ops_pb2.LedgerInfo:
        return self._unary("record_witness", request, fields, timeout)

    def cordon(self, request: ops_pb2.CordonRequest | None = None, /, *, timeout: float | None = None,
               **fields: Any) -> ops_pb2.WorkerStatus:
        return self._unary("cordon", request, fields, timeout)
