"""Dry-run admission (Claims.Plan) against the real decision, and the
maintenance verbs cordon, uncordon and drain through a restart."""

from __future__ import annotations

import threading
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protos.pool.v1 import agent_pb2, claims_pb2, ops_pb2, types_pb2

from .conftest import wait_for

OUTCOME = ("state", "reason", "worker", "devices_mdev", "queue_position", "hold_uj", "borrowed", "borrowed_uj")


def request(claim_id: str, tenant: str, uj: int, mdev: int, priority: int, gang: str = "", size: int = 0):
    return claims_pb2.SubmitRequest(claim_id=claim_id, tenant=tenant, estimate_uj=uj, priority=priority,
                                    resources=types_pb2.Resources(gpu_mdev=mdev), gang_id=gang, gang_size=size)


def outcome(status: claims_pb2.ClaimStatus) -> tuple:
    return tuple(dict(getattr(status, f)) if f == "devices_mdev" else getattr(status, f) for f in OUTCOME)


def ledger_length(s) -> int:
    return s.ops.LedgerHead(ops_pb2.LedgerHeadRequest()).length


claims_st = st.tuples(st.sampled_from(["alpha", "beta"]), st.integers(1, 45) .map(lambda k: k * 1_000_000_000),
                      st.sampled_from([0, 100, 500, 1000]), st.integers(-1, 2))


def test_plan_then_submit_gives_the_same_outcome(cluster):
    s = cluster()
    s.register("w1", gpus=2)
    counter = iter(range(10_000))

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(claims_st, st.booleans())
    def check(claim, release_one):
        tenant, uj, mdev, priority = claim
        if release_one:   # vary the state between examples: release the oldest open claim
            open_ = [c for c in s.claims.List(claims_pb2.ListClaimsRequest(), timeout=10).claims
                     if c.state in (types_pb2.PENDING, types_pb2.ADMITTED)]
            if open_:
                s.claims.Release(claims_pb2.ReleaseRequest(claim_id=open_[0].claim_id), timeout=10)
        r = request(f"p{next(counter)}", tenant, uj, mdev, priority)
        before = ledger_length(s)
        plan = s.claims.Plan(claims_pb2.PlanRequest(claims=[r]), timeout=10)
        assert ledger_length(s) == before, "a dry run writes no receipt"
        submitted = s.claims.Submit(r, timeout=10)
        assert outcome(plan.claims[0]) == outcome(submitted)
        preempted = {c.claim_id for c in s.claims.List(claims_pb2.ListClaimsRequest(states=[types_pb2.PREEMPTED]),
                                                         timeout=10).claims}
        assert {v.claim_id for v in plan.victims} <= preempted
        assert all(v.for_claim == r.claim_id and v.why for v in plan.victims)
        if submitted.state == types_pb2.PENDING:
            [explanation] = plan.explanations
            assert explanation.reason == submitted.reason and explanation.queue_position == submitted.queue_position
    check()


def meter(s, host: str, device: str, claim_id: str, uj: int) -> None:
    """One window of `device` charging `claim_id` `uj` (the rest unallocated), as its agent would stream it."""
    now = time.time_ns()
    s.stream(host, [agent_pb2.Window(device_id=device, seq=1, start_ns=now - 1_000_000_000, end_ns=now, uj=2 * uj,
                                     grade=types_pb2.GRADE_HW_SHUNT, shares=[
        types_pb2.Share(occupant=claim_id, uj=uj, grade=types_pb2.GRADE_MODEL_BASED),
        types_pb2.Share(occupant="unallocated", uj=uj, grade=types_pb2.GRADE_MODEL_BASED)])])


def test_plan_of_a_gang_and_of_a_preemption_names_where_and_whom(cluster):
    s = cluster()
    s.register("w1", gpus=2)
    s.claims.Submit(request("low", "alpha", 50_000_000_000, 100, 0), timeout=10)   # 50 of alpha's 60 kJ
    s.claims.Submit(request("b1", "beta", 1_000_000, 1000, 0), timeout=10)
    device = next(iter(s.claims.Get(claims_pb2.GetClaimRequest(claim_id="low"), timeout=10).devices_mdev))
    meter(s, "w1", device, "low", 1_000_000)   # measured: preempting it frees all but this joule
    wait_for("low's joule", lambda: s.claims.Get(claims_pb2.GetClaimRequest(claim_id="low")).measured_uj > 0)
    s.register("w1", gpus=2)   # the stream closed and took the worker's liveness with it: registered again
    plan = s.claims.Plan(claims_pb2.PlanRequest(claims=[request("high", "alpha", 20_000_000_000, 100, 5)]),
                         timeout=10)
    [status] = plan.claims
    assert status.state == types_pb2.ADMITTED and status.worker == "w1" and status.ledger_seq == 0
    assert [(v.claim_id, v.for_claim) for v in plan.victims] == [("low", "high")]
    assert "outranked in priority" in plan.victims[0].why
    assert s.claims.Get(claims_pb2.GetClaimRequest(claim_id="low")).state == types_pb2.ADMITTED  # nothing changed
    gang = [request(f"g{i}", "alpha", 1_000_000, 100, 0, "g", 2) for i in range(2)]
    done = s.poolctl("submit", "g0", "--tenant", "alpha", "--estimate-uj", "1000000", "--gang", "g",
                     "--gang-size", "2", "--dry-run")
    assert done.stdout.startswith("dry run: nothing was recorded") and "GANG_INCOMPLETE" in done.stdout
    whole = s.claims.Plan(claims_pb2.PlanRequest(claims=gang), timeout=10)
    assert [(c.state, c.worker) for c in whole.claims] == [(types_pb2.ADMITTED, "w1")] * 2   # admitted whole
    assert not whole.explanations and sum(sum(c.devices_mdev.values()) for c in whole.claims) == 200
    assert s.json("claims")["claims"] and "g0" not in {c["claim_id"] for c in s.json("claims")["claims"]}
    bad = s.poolctl("submit", "x!", "--tenant", "alpha", "--estimate-uj", "1", "--dry-run", check=False)
    assert bad.returncode == 1 and bad.stderr.startswith("poolctl: INVALID_CLAIM: claim_id")


def test_cordon_and_drain_are_receipts_that_survive_restart_and_reregistration(cluster):
    s = cluster()
    s.register("w1", gpus=1)
    s.claims.Submit(request("running", "alpha", 1_000_000, 500, 0), timeout=10)
    before = ledger_length(s)
    cordoned = s.json("workers", "cordon", "w1")["cordoned"]
    assert cordoned and ledger_length(s) == before + 1
    s.poolctl("workers", "cordon", "w1")
    assert ledger_length(s) == before + 1, "cordoning a cordoned worker records nothing"
    s.claims.Submit(request("new", "alpha", 1_000_000, 100, 0), timeout=10)
    e = s.json("explain", "new")
    assert e["reason"] == "NO_ELIGIBLE_WORKER" and e["workers"][0]["reason"] == "WORKER_CORDONED"
    s.stop()
    s.start()
    s.register("w1", gpus=1)      # the agent registers again: the cordon is the operator's and stays
    [w] = s.json("workers")["workers"]
    assert w["cordoned"] and w["active_claims"] == ["running"]
    table = s.poolctl("workers").stdout
    assert "cordoned" in table.splitlines()[0] and "1/∞" in table and "500" in table   # claims, free mdev
    timed_out = s.poolctl("workers", "drain", "w1", "--wait", "--wait-timeout", "1", check=False)
    assert timed_out.returncode == 1 and "DRAIN_TIMEOUT" in timed_out.stderr
    threading.Timer(1.0, lambda: s.claims.Release(claims_pb2.ReleaseRequest(claim_id="running"), timeout=10)).start()
    started = time.monotonic()
    drained = s.json("workers", "drain", "w1", "--wait", "--wait-timeout", "30")
    assert drained["active_claims"] == [] and drained["cordoned"] and time.monotonic() - started >= 0.9
    assert s.json("claims", "new")["state"] == "PENDING"
    uncordoned = s.json("workers", "uncordon", "w1")
    assert not uncordoned["cordoned"] and s.json("claims", "new")["state"] == "ADMITTED"
    missing = s.poolctl("workers", "cordon", "nope", check=False)
    assert missing.returncode == 1 and missing.stderr.startswith("poolctl: UNKNOWN_WORKER:")
