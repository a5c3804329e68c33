"""pool_client against a real pool-scheduler over mutual TLS: every method
answers with the generated message, a refusal is the exception class of its
code, the context's tenant is filled in, addresses fail over, and the asyncio
client does the same."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

import pool_client
from pool_client import aio, errors
from pool_client.errors import PoolError
from protos.pool.v1 import claims_pb2, types_pb2

J = 1_000_000


def client(s, principal: str = "operator", **kwargs) -> pool_client.Client:
    scheduler = kwargs.pop("scheduler", s.address)
    return s.as_principal(principal).library(*(scheduler if isinstance(scheduler, list) else [scheduler]), **kwargs)


def test_importing_the_library_loads_nothing_of_the_scheduler():
    code = ("import sys, pool_client, pool_client.sync, pool_client.aio, pool_client.channel, pool_client.config\n"
            "bad = sorted(m for m in sys.modules if m == 'scheduler' or m.startswith(('scheduler.', 'agent')))\n"
            "assert not bad, bad\n"
            "import pool_client as p; p.Client; p.PoolError\n"
            "print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_bare_import_loads_no_grpc():
    done = subprocess.run([sys.executable, "-c", "import sys, pool_client, pool_client.config\n"
                           "print(sorted(m for m in sys.modules if m.startswith('grpc')))"],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_every_error_code_has_its_class():
    for value in types_pb2.ErrorCode.DESCRIPTOR.values:
        if value.number == 0:
            continue
        cls = errors.BY_CODE[value.name]
        assert issubclass(cls, PoolError) and cls.code == value.name
        assert getattr(errors, cls.__name__) is cls
    assert errors.UnknownClaim.__name__ == "UnknownClaim" and errors.NotLeader.code == "NOT_LEADER"


def test_a_round_trip_with_typed_answers_and_errors(cluster):
    s = cluster()
    s.register("w1")
    with client(s) as pool:
        status = pool.submit(claim_id="c1", tenant="alpha", estimate_uj=5 * J,
                             resources=types_pb2.Resources(gpu_mdev=500))
        assert isinstance(status, claims_pb2.ClaimStatus) and status.claim_id == "c1"
        assert status.state == types_pb2.ClaimState.Value("ADMITTED")
        again = pool.submit(claims_pb2.SubmitRequest(claim_id="c1", tenant="alpha", estimate_uj=5 * J,
                                                     resources=types_pb2.Resources(gpu_mdev=500)))
        assert again.ledger_seq == status.ledger_seq   # an identical resubmission is the first answer
        assert [c.claim_id for c in pool.list_all(page_size=1)] == ["c1"]
        assert pool.get(claim_id="c1").state == status.state
        assert pool.release(claim_id="c1").state == types_pb2.ClaimState.Value("RELEASED")
        with pytest.raises(errors.UnknownClaim) as refused:
            pool.get(claim_id="nope")
        assert refused.value.code == "UNKNOWN_CLAIM" and refused.value.message and \
            refused.value.status.name == "NOT_FOUND"
        with pytest.raises(errors.UnknownTenant):
            pool.submit(claim_id="c2", tenant="nobody", estimate_uj=J)
        assert pool.ledger_head().length > 0
        assert {n.name for n in pool.tenants().tenants} >= {"root", "alpha", "beta"}
        assert sum(len(chunk.receipts) for chunk in pool.ledger_export()) > 0


def test_a_context_tenant_fills_requests_that_name_none(cluster):
    s = cluster()
    with client(s, tenant="beta") as pool:
        assert pool.submit(claim_id="t1", estimate_uj=J).tenant == "beta"
        assert pool.submit(claim_id="t2", tenant="alpha", estimate_uj=J).tenant == "alpha"
        assert [c.claim_id for c in pool.list_all()] == ["t1"]


def test_a_dead_address_first_fails_over_to_the_next(cluster, harness):
    s = cluster()
    from e2e.conftest import free_port
    with client(s, scheduler=[f"127.0.0.1:{free_port()}", s.address]) as pool:
        assert pool.ledger_head().length > 0
        assert pool.targets.current == s.address


def test_the_asyncio_client_does_the_same(cluster):
    s = cluster()
    cert, key = s.pki.files("operator")

    async def run() -> None:
        async with aio.Client(s.address, ca=str(s.pki.ca), cert=str(cert), key=str(key)) as pool:
            status = await pool.submit(claim_id="a1", tenant="alpha", estimate_uj=J)
            assert status.claim_id == "a1"
            assert [c.claim_id async for c in pool.list_all()] == ["a1"]
            with pytest.raises(errors.UnknownClaim):
                await pool.get(claim_id="nope")
            events = pool.watch(claim_id="a1")
            first = await events.__anext__()
            assert first.status.claim_id == "a1" and first.kind == claims_pb2.EVENT_CURRENT
            await pool.release(claim_id="a1")
            released = await events.__anext__()
            assert released.status.state == types_pb2.ClaimState.Value("RELEASED")
            await events.aclose()
            chunks = [c async for c in pool.ledger_export()]
            assert chunks and chunks[0].receipts
    asyncio.run(run())


def test_watch_delivers_the_current_status_then_changes(cluster):
    s = cluster()
    with client(s) as pool:
        pool.submit(claim_id="w1", tenant="alpha", estimate_uj=J)
        events = pool.watch(claim_id="w1")
        assert next(events).kind == claims_pb2.EVENT_CURRENT
        pool.release(claim_id="w1")
        assert next(events).status.state == types_pb2.ClaimState.Value("RELEASED")
        events.close()


def test_every_rpc_of_claims_and_ops_is_a_method_of_both_clients():
    from pool_client import calls, sync
    from protos.pool.v1 import claims_pb2, ops_pb2
    served = {(s.name, m.name) for f in (claims_pb2, ops_pb2) for s in f.DESCRIPTOR.services_by_name.values()
              for m in s.methods}
    assert served == {(rpc.service, rpc.name) for rpc in calls.RPCS}
    for rpc in calls.RPCS:
        assert callable(getattr(sync.Client, rpc.method)) and callable(getattr(aio.Client, rpc.method))
        assert rpc.resend in ("yes", "no", "with claim_ids")


class _Failed(Exception):
    """A stand-in for a grpc.RpcError, as the library reads one."""

    def __init__(self, status, details, metadata=()):
        self._status, self._details, self._metadata = status, details, metadata

    def code(self):
        return self._status

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._metadata


def test_what_counts_as_not_sent_unknown_or_answered():
    import grpc
    from pool_client.failover import Sent, sent
    U = grpc.StatusCode.UNAVAILABLE
    assert sent(_Failed(U, "NOT_LEADER: this scheduler is a standby; leader: a:1")) is Sent.NOT_SENT
    assert sent(_Failed(U, "NOT_READY: replaying")) is Sent.NOT_SENT
    assert sent(_Failed(U, "failed to connect to all addresses; last error: Connection refused")) is Sent.NOT_SENT
    assert sent(_Failed(U, "SHUTTING_DOWN: this scheduler is stopping and did nothing with this call; …")) \
        is Sent.NOT_SENT
    assert sent(_Failed(U, "SHUTTING_DOWN: this scheduler stopped before this call's outcome was known")) \
        is Sent.UNKNOWN
    assert sent(_Failed(U, "LEDGER_UNAVAILABLE: the append failed")) is Sent.UNKNOWN
    assert sent(_Failed(U, "Socket closed")) is Sent.UNKNOWN
    assert sent(_Failed(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")) is Sent.UNKNOWN
    assert sent(_Failed(grpc.StatusCode.CANCELLED, "Cancelled")) is Sent.UNKNOWN
    assert sent(_Failed(grpc.StatusCode.NOT_FOUND, "UNKNOWN_CLAIM: no claim 'x'")) is Sent.ANSWERED
    error = errors.from_rpc_error(_Failed(U, "LEDGER_UNAVAILABLE: x"), unknown=True)
    assert isinstance(error, errors.LedgerUnavailable) and isinstance(error, errors.OutcomeUnknown)
    limited = errors.from_rpc_error(_Failed(grpc.StatusCode.RESOURCE_EXHAUSTED, "RATE_LIMITED: slow down",
                                            (("pool-retry-after-ms", "250"),)))
    assert isinstance(limited, errors.RateLimited) and limited.retry_after == 0.25


from hypothesis import given, strategies as st  # noqa: E402


@given(st.lists(st.sampled_from(["a:1", "b:1", "c:1"]), min_size=1, max_size=3, unique=True),
       st.lists(st.none() | st.sampled_from(["a:1", "b:1", "c:1", "d:1"]), max_size=30))
def test_targets_follow_a_hint_at_once_and_visit_every_address(listed, hints):
    import grpc
    from pool_client.failover import Targets
    targets = Targets(listed)
    for hint in hints:
        metadata = (("pool-leader", hint),) if hint else ()
        before = targets.current
        wait = targets.failed(_Failed(grpc.StatusCode.UNAVAILABLE, "NOT_LEADER: x", metadata))
        assert 0 <= wait <= 1.0                      # backoff is capped
        if hint and hint != before:
            assert targets.current == hint and wait == 0
        assert targets.current in targets.addresses
    targets.succeeded()
    seen = {targets.current}
    for _ in range(len(targets.addresses) - 1):      # without hints, every address comes round in turn
        targets.failed(None)
        seen.add(targets.current)
    assert seen == set(targets.addresses)
