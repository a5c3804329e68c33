"""Every answer bounded (issue 21 item 3), over mutual TLS against a real
scheduler with a page of 2: Workers, PreemptionOrder and ReclamationOrder
answer a page at a time and the pages join to the whole answer; poolctl
follows them; Explain's worker rows are capped and counted; Plan takes at
most as many claims as SubmitMany."""

from __future__ import annotations

import grpc
import pytest

from protos.limits import SUBMIT_MANY_MAX
from protos.pool.v1 import claims_pb2, ops_pb2, types_pb2

PAGE = "\n[limits]\npage_size = 2\n"
HOSTS = ("w1", "w2", "w3", "h1", "h2")


def every_page(method, request, *lists: str) -> tuple[dict[str, list], int]:
    joined: dict[str, list] = {name: [] for name in lists}
    pages = 0
    while True:
        answer = method(request, timeout=10)
        pages += 1
        for name in lists:
            assert len(getattr(answer, name)) <= 2
            joined[name] += list(getattr(answer, name))
        if not answer.next_page_token:
            return joined, pages
        request.page_token = answer.next_page_token


@pytest.fixture
def busy(cluster, harness):
    s = cluster(harness.TREE + PAGE)
    for host in HOSTS:
        s.register(host, gpus=1)
    for i in range(7):
        s.claims.Submit(claims_pb2.SubmitRequest(claim_id=f"c{i}", tenant="alpha" if i % 2 else "beta",
                                                 estimate_uj=1, resources=types_pb2.Resources(cpu_millis=100)),
                        timeout=10)
    return s


def test_workers_and_the_orders_answer_a_page_at_a_time_and_poolctl_follows(busy):
    s = busy
    workers, pages = every_page(s.ops.Workers, ops_pb2.WorkersRequest(), "workers")
    assert [w.worker for w in workers["workers"]] == sorted(HOSTS) and pages == 3
    assert [w["worker"] for w in s.json("workers")["workers"]] == sorted(HOSTS)
    # a host's claim ids are capped at the page size too, the rest counted (100,000 on one host: 13.7 MiB)
    held = {w.worker: (list(w.active_claims), w.active_claims_omitted) for w in workers["workers"]}
    assert all(len(ids) <= 2 for ids, _ in held.values())
    assert sum(len(ids) + omitted for ids, omitted in held.values()) == 7
    assert any(omitted for _, omitted in held.values())

    whole = s.ops.PreemptionOrder(ops_pb2.PreemptionOrderRequest(page_size=1000), timeout=10)
    assert len(whole.order) == 7 and not whole.next_page_token
    paged, pages = every_page(s.ops.PreemptionOrder, ops_pb2.PreemptionOrderRequest(), "order")
    assert paged["order"] == list(whole.order) and pages == 4
    assert [v["claim_id"] for v in s.json("preemption-order")["order"]] == [v.claim_id for v in whole.order]

    whole = s.ops.ReclamationOrder(ops_pb2.ReclamationOrderRequest(page_size=1000), timeout=10)
    assert len(whole.verdicts) == 7
    paged, _ = every_page(s.ops.ReclamationOrder, ops_pb2.ReclamationOrderRequest(), "verdicts", "order")
    assert paged["verdicts"] == list(whole.verdicts) and paged["order"] == list(whole.order)
    assert len(s.json("reclamation-order")["verdicts"]) == 7

    with pytest.raises(grpc.RpcError) as caught:
        s.ops.Workers(ops_pb2.WorkersRequest(page_token="x.y"), timeout=10)
    assert caught.value.details().startswith("INVALID_ARGUMENT: page_token")
    with pytest.raises(grpc.RpcError) as caught:
        s.ops.Workers(ops_pb2.WorkersRequest(page_size=1001), timeout=10)
    assert caught.value.details().startswith("INVALID_ARGUMENT: page_size")


def test_explain_caps_its_worker_rows_and_plan_its_claims(busy):
    s = busy
    s.claims.Submit(claims_pb2.SubmitRequest(claim_id="huge", tenant="alpha", estimate_uj=1,
                                             resources=types_pb2.Resources(cpu_millis=10 ** 9)), timeout=10)
    explained = s.ops.Explain(ops_pb2.ExplainRequest(claim_id="huge"), timeout=10)
    assert len(explained.workers) == 2 and explained.workers_omitted == len(HOSTS) - 2
    # the tenant sees the workers its claim could use (none here), not the fleet's capacity
    own = s.as_principal("alpha").ops.Explain(ops_pb2.ExplainRequest(claim_id="huge"), timeout=10)
    assert not own.workers and own.workers_omitted == len(HOSTS) and own.reason == explained.reason
    # and another tenant's claim is answered as an unknown one, word for word
    beta = s.as_principal("beta").ops
    for claim_id in ("huge", "no-such-claim"):
        with pytest.raises(grpc.RpcError) as caught:
            beta.Explain(ops_pb2.ExplainRequest(claim_id=claim_id), timeout=10)
        assert (caught.value.code(), caught.value.details()) == (grpc.StatusCode.NOT_FOUND,
                                                                 f"UNKNOWN_CLAIM: no claim {claim_id!r}")
    with pytest.raises(grpc.RpcError) as caught:
        s.claims.Plan(claims_pb2.PlanRequest(claims=[
            claims_pb2.SubmitRequest(claim_id=f"p{i}", tenant="alpha", estimate_uj=1)
            for i in range(SUBMIT_MANY_MAX + 1)]), timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith(f"INVALID_ARGUMENT: claims: at most {SUBMIT_MANY_MAX} claims per plan")


def test_drain_refuses_a_negative_wait_timeout():
    import subprocess
    import sys
    from pathlib import Path
    done = subprocess.run([str(Path(sys.executable).parent / "poolctl"), "workers", "drain", "w1", "--wait",
                           "--wait-timeout", "-1"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "'-1' is not a number of seconds ≥ 0" in done.stderr, done.stderr
