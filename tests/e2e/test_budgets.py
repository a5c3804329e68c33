"""Budgets per principal and pools per role (issue 21 item 1), over mutual TLS
against a real scheduler: one tenant that holds every Watch it may, or
causes every receipt it may, is refused PRINCIPAL_LIMIT with a retry-after
hint, and nobody else notices; a tenant that fills the clients' pool does
not take the capacity kept for health, agents and operators."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.pool.v1 import agent_pb2, claims_pb2, ops_pb2, types_pb2

EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


@pytest.fixture
def budgeted(tmp_path: Path, harness) -> Iterator:
    """start(alpha="streams = 2", limits="…"): a scheduler whose [principals.alpha]
    has those keys too, and whose [limits] those."""
    started = []

    def start(alpha: str = "", limits: str = ""):
        s = harness.Scheduler(tmp_path, extra=f"[limits]\n{limits}\n" if limits else "")
        text = s.config.read_text()
        declared = '[principals."alpha"]\nrole = "tenant"\ntenants = ["alpha"]\n'
        assert declared in text
        s.config.write_text(text.replace(declared, declared + alpha + "\n"))
        started.append(s)
        return s.start()

    yield start
    for s in started:
        s.stop()


def submit(caller, claim_id: str, tenant: str):
    return caller.claims.Submit(claims_pb2.SubmitRequest(claim_id=claim_id, tenant=tenant, estimate_uj=1),
                                timeout=10)


def watch(caller, tenant: str):
    """An open Watch that never reads past its first message."""
    stream = caller.claims.Watch(claims_pb2.WatchRequest(tenant=tenant), timeout=60)
    next(stream)
    return stream


def refusal(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value


def retry_after(error: grpc.RpcError) -> int:
    return int(dict(error.trailing_metadata())["pool-retry-after-ms"])


def test_a_tenant_past_its_watches_is_refused_and_nobody_else_notices(budgeted, harness):
    s = budgeted(alpha="streams = 2\ncalls = 3")
    alpha, beta = s.as_principal("alpha"), s.as_principal("beta")
    submit(alpha, "a1", "alpha")
    submit(beta, "b1", "beta")
    held = [watch(alpha, "alpha"), watch(alpha, "alpha")]
    error = refusal(lambda: watch(alpha, "alpha"))
    assert error.code() == EXHAUSTED and error.details().startswith("PRINCIPAL_LIMIT: 'alpha' has 2 streams open")
    assert retry_after(error) > 0
    # one call left in its budget of three: a unary call passes
    assert alpha.claims.Get(claims_pb2.GetClaimRequest(claim_id="a1"), timeout=10).claim_id == "a1"
    # another tenant, the operator, health: as if alpha were not there
    extra = [watch(beta, "beta") for _ in range(3)]
    assert submit(beta, "b2", "beta").claim_id == "b2"
    assert s.serving()
    s.register("w1")
    # the budget comes back when the streams end
    for stream in held:
        stream.cancel()

    def watches_again() -> bool:
        try:
            held.append(watch(alpha, "alpha"))
        except grpc.RpcError as exc:
            assert exc.code() == EXHAUSTED
            return False
        return True
    harness.wait_for("alpha's budget to come back", watches_again)
    for stream in held + extra:
        stream.cancel()


def test_calls_in_progress_count_streams_too(budgeted):
    s = budgeted(alpha="calls = 2")
    alpha = s.as_principal("alpha")
    submit(alpha, "a1", "alpha")
    held = [watch(alpha, "alpha"), watch(alpha, "alpha")]
    error = refusal(lambda: alpha.claims.Get(claims_pb2.GetClaimRequest(claim_id="a1"), timeout=10))
    assert error.details().startswith("PRINCIPAL_LIMIT: 'alpha' has 2 calls in progress")
    for stream in held:
        stream.cancel()


def test_a_tenant_that_fills_the_clients_pool_leaves_health_agents_and_operators_theirs(budgeted):
    # today: one global max_concurrent_rpcs, and alpha's Watches filled it for everyone
    s = budgeted(alpha="streams = 100\ncalls = 100", limits="max_concurrent_rpcs = 4")
    alpha, beta = s.as_principal("alpha"), s.as_principal("beta")
    submit(alpha, "a1", "alpha")
    held = [watch(alpha, "alpha") for _ in range(4)]
    error = refusal(lambda: submit(beta, "b1", "beta"))
    assert error.code() == EXHAUSTED and error.details().startswith("SERVICE_BUSY: the clients pool")
    assert retry_after(error) > 0
    # health, the operator and an agent keep their own pools
    health = health_pb2_grpc.HealthStub(s.as_principal("anyone").channel)
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING
    assert submit(s.operator, "b2", "beta").claim_id == "b2"
    s.register("w1")
    up = queue.Queue()
    up.put(agent_pb2.AgentMessage(hello=agent_pb2.Hello(host_id="w1")))
    agent = s.agents.Stream(iter(up.get, None), timeout=30)
    assert next(agent).WhichOneof("body") == "occupancy"
    up.put(None)
    agent.cancel()
    for stream in held:
        stream.cancel()


def test_receipts_per_hour_refuse_writes_not_reads_and_leave_no_receipt(budgeted):
    s = budgeted(alpha="receipts_per_hour = 120")   # a bucket a minute deep: 2 receipts at once
    alpha, beta = s.as_principal("alpha"), s.as_principal("beta")
    submit(alpha, "a1", "alpha")
    submit(alpha, "a2", "alpha")
    length = s.ops.LedgerHead(ops_pb2.LedgerHeadRequest(),
                              timeout=10).length
    error = refusal(lambda: submit(alpha, "a3", "alpha"))
    assert error.code() == EXHAUSTED and "receipts_per_hour = 120" in error.details()
    assert error.details().startswith("PRINCIPAL_LIMIT")
    assert retry_after(error) > 1000   # 120 an hour: the next receipt is ~30 s away
    assert alpha.claims.Get(claims_pb2.GetClaimRequest(claim_id="a1"), timeout=10).claim_id == "a1"
    assert submit(beta, "b1", "beta").claim_id == "b1"
    after = s.ops.LedgerHead(ops_pb2.LedgerHeadRequest(),
                             timeout=10).length
    assert after == length + 1   # beta's receipt only


def test_a_plan_costs_the_submissions_it_judges(budgeted):
    # a Plan of many claims is a SubmitMany's decisions without the receipts: the same rate pays for it
    s = budgeted(alpha="submits_per_s = 1")   # and a burst of ten seconds' worth
    alpha = s.as_principal("alpha")
    alpha.claims.Plan(claims_pb2.PlanRequest(claims=[
        claims_pb2.SubmitRequest(claim_id=f"p{i}", tenant="alpha", estimate_uj=1) for i in range(10)]), timeout=10)
    error = refusal(lambda: submit(alpha, "a1", "alpha"))
    assert error.code() == EXHAUSTED and error.details().startswith("RATE_LIMITED: 'alpha' is over 1 submissions")
    assert retry_after(error) > 0
    assert submit(s.as_principal("beta"), "b1", "beta").claim_id == "b1"


def test_calls_past_calls_per_s_wait_their_turn_and_are_answered(budgeted):
    # 5 a second with 5 at once: 20 calls (malformed ones too) take at least 3 s, and every one is
    # answered as it would have been (a floor, not a timing); another principal is not held back
    s = budgeted(alpha="calls_per_s = 5")
    alpha = s.as_principal("alpha")
    raw = alpha.channel.unary_unary("/pool.v1.Claims/Submit")
    began = time.monotonic()
    for i in range(10):
        assert submit(alpha, f"a{i}", "alpha").claim_id == f"a{i}"
        error = refusal(lambda: raw(b"\x0a\xff", timeout=10))   # truncated: still paced, then refused
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    took = time.monotonic() - began
    assert took >= 2.9, f"20 calls at 5 a second took {took:.2f} s"
    assert submit(s.as_principal("beta"), "b1", "beta").claim_id == "b1"


def test_a_submit_many_with_no_submission_left_is_refused_whole_and_leaves_no_receipt(budgeted):
    s = budgeted(alpha="submits_per_s = 1")   # a burst of ten
    alpha = s.as_principal("alpha")
    many = lambda prefix, n: claims_pb2.SubmitManyRequest(claims=[  # noqa: E731
        claims_pb2.SubmitRequest(claim_id=f"{prefix}{i}", tenant="alpha", estimate_uj=1) for i in range(n)])
    first = many("a", 12)
    first.claims.add(claim_id="a0", tenant="alpha", estimate_uj=2)   # judged, it would be DUPLICATE_CLAIM
    answer = alpha.claims.SubmitMany(first, timeout=10)   # ten taken; the rest refused in their results, unjudged
    assert [r.WhichOneof("result") for r in answer.results] == ["status"] * 10 + ["refused"] * 3
    assert {r.refused.code for r in answer.results[10:]} == {types_pb2.ErrorCode.Value("RATE_LIMITED")}
    length = s.ops.LedgerHead(ops_pb2.LedgerHeadRequest(), timeout=10).length
    error = refusal(lambda: alpha.claims.SubmitMany(many("b", 5), timeout=10))
    assert error.code() == EXHAUSTED and error.details().startswith("RATE_LIMITED: 'alpha' is over 1 submissions")
    assert retry_after(error) > 0
    assert s.ops.LedgerHead(ops_pb2.LedgerHeadRequest(), timeout=10).length == length
