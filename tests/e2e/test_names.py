"""Names per tenant (docs/RULES.md §names), over real mTLS: two tenants each
have claim `job-1` and gang `train-42` at once, each working normally; an
operator naming `job-1` alone is told to name the tenant; a restart gives the
same state."""

from __future__ import annotations

import grpc
import pytest

from protos.pool.v1 import claims_pb2, ops_pb2, proofs_pb2, proofs_pb2_grpc, types_pb2

J = 1_000_000


def submit(caller, claim_id: str, tenant: str, gang: str = "", size: int = 0, cpu: int = 1000):
    return caller.claims.Submit(claims_pb2.SubmitRequest(
        claim_id=claim_id, tenant=tenant, gang_id=gang, gang_size=size, estimate_uj=J,
        resources=types_pb2.Resources(cpu_millis=cpu)), timeout=10)


def refused(call, *args) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as told:
        call(*args, timeout=10)
    return told.value


def test_two_tenants_each_have_job_1_and_gang_train_42(cluster, harness):
    s = cluster()
    s.register("w1")
    alpha, beta = s.as_principal("alpha"), s.as_principal("beta")
    for caller, tenant in ((alpha, "alpha"), (beta, "beta")):
        assert submit(caller, "job-1", tenant).tenant == tenant
        for member in ("m1", "m2"):
            status = submit(caller, f"{tenant}-{member}", tenant, gang="train-42", size=2)
            assert (status.gang_id, status.request.gang_id) == ("train-42", "train-42")
    # sent again, each is its own claim's identical resubmission, not the other's duplicate
    assert submit(beta, "job-1", "beta").tenant == "beta"

    def get(caller, claim_id="job-1", tenant=""):
        return caller.claims.Get(claims_pb2.GetClaimRequest(claim_id=claim_id, tenant=tenant), timeout=10)

    harness.wait_for("both gangs and both job-1s admitted", lambda: all(
        get(c, i).state == types_pb2.ADMITTED for c, t in ((alpha, "alpha"), (beta, "beta"))
        for i in ("job-1", f"{t}-m1", f"{t}-m2")))
    mine, theirs = get(alpha), get(beta)
    assert (mine.claim_id, mine.tenant, theirs.claim_id, theirs.tenant) == ("job-1", "alpha", "job-1", "beta")
    assert mine.request.claim_id == "job-1"

    # the operator: an id two tenants use needs the tenant, in the field or as TENANT/ID
    ambiguous = refused(s.claims.Get, claims_pb2.GetClaimRequest(claim_id="job-1"))
    assert ambiguous.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ambiguous.details().startswith("AMBIGUOUS_CLAIM: ") and "alpha, beta" in ambiguous.details()
    assert get(s.operator, tenant="beta") == theirs
    assert get(s.operator, "beta/job-1") == theirs
    assert get(s.operator, "alpha-m1").tenant == "alpha"   # an id only one tenant has needs no tenant

    # a tenant naming the other's claim is told exactly what an id nobody has gets
    foreign = refused(alpha.claims.Get, claims_pb2.GetClaimRequest(claim_id="job-1", tenant="beta"))
    unknown = refused(alpha.claims.Get, claims_pb2.GetClaimRequest(claim_id="job-9", tenant="beta"))
    assert (foreign.code(), foreign.details().replace("job-1", "job-9")) == (unknown.code(), unknown.details())
    assert refused(alpha.claims.Get, claims_pb2.GetClaimRequest(claim_id="beta-m1")).details() == \
        "UNKNOWN_CLAIM: no claim 'beta-m1'"

    # each tenant's requests reach its own claim only
    progressed = beta.claims.Progress(claims_pb2.ProgressRequest(claim_id="job-1", completed_units=5), timeout=10)
    assert (progressed.tenant, progressed.completed_units) == ("beta", 5)
    assert get(alpha).completed_units == 0
    explained = beta.ops.Explain(ops_pb2.ExplainRequest(claim_id="job-1"), timeout=10)
    assert (explained.claim_id, explained.tenant, explained.state) == ("job-1", "beta", types_pb2.ADMITTED)
    watched = next(iter(beta.claims.Watch(claims_pb2.WatchRequest(claim_id="job-1"), timeout=10)))
    assert (watched.status.claim_id, watched.status.tenant, watched.status.completed_units) == ("job-1", "beta", 5)
    watched = next(iter(s.claims.Watch(claims_pb2.WatchRequest(claim_id="job-1", claim_tenant="alpha"), timeout=10)))
    assert (watched.status.tenant, watched.status.completed_units) == ("alpha", 0)
    listed = alpha.claims.List(claims_pb2.ListClaimsRequest(), timeout=10).claims
    assert sorted(c.claim_id for c in listed) == ["alpha-m1", "alpha-m2", "job-1"]
    assert {c.tenant for c in listed} == {"alpha"}

    released = alpha.claims.Release(claims_pb2.ReleaseRequest(claim_id="job-1"), timeout=10)
    assert (released.tenant, released.state) == ("alpha", types_pb2.RELEASED)
    assert get(beta).state == types_pb2.ADMITTED
    bare = [c for c in s.claims.List(claims_pb2.ListClaimsRequest(), timeout=10).claims if c.claim_id == "job-1"]
    assert sorted((c.tenant, c.state) for c in bare) == [("alpha", types_pb2.RELEASED), ("beta", types_pb2.ADMITTED)]

    # a gang id is its tenant's: alpha's gang ends, beta's stands; then alpha may start train-42 again
    for member in ("alpha-m1", "alpha-m2"):
        alpha.claims.Release(claims_pb2.ReleaseRequest(claim_id=member), timeout=10)
    assert all(get(beta, f"beta-{m}").state == types_pb2.ADMITTED for m in ("m1", "m2"))
    assert submit(alpha, "alpha-m3", "alpha", gang="train-42", size=1).gang_id == "train-42"
    harness.wait_for("alpha's new train-42 admitted", lambda: get(alpha, "alpha-m3").state == types_pb2.ADMITTED)

    # the ledger: each claim's receipts are its own (submitted, admitted, and released or progress),
    # named by the key they record (docs/LEDGER.md)
    seqs = {}
    for caller, tenant in ((alpha, "alpha"), (beta, "beta")):
        answer = proofs_pb2_grpc.ProofsStub(caller.channel).ProveClaim(
            proofs_pb2.ProveClaimRequest(claim_id="job-1"), timeout=10)
        assert answer.claim_id == f"{tenant}/job-1"
        seqs[tenant] = {*answer.pending, *(r.seq for r in answer.receipts)}
    assert len(seqs["alpha"]) == len(seqs["beta"]) == 3 and not seqs["alpha"] & seqs["beta"]

    # a restart replays to the same state
    every = {(c.tenant, c.claim_id): c for c in s.claims.List(claims_pb2.ListClaimsRequest(), timeout=10).claims}
    s.stop()
    s.start()
    again = {(c.tenant, c.claim_id): c for c in s.claims.List(claims_pb2.ListClaimsRequest(), timeout=10).claims}
    assert again == every
    assert get(beta) == get(s.operator, "job-1", "beta") != get(s.operator, "alpha/job-1")
    beta.claims.Release(claims_pb2.ReleaseRequest(claim_id="job-1"), timeout=10)
    assert get(beta).state == types_pb2.RELEASED


def test_an_operator_names_the_tenant_for_every_call_that_names_a_claim(cluster):
    """Progress, Release, Explain, Bind, PreemptionOrder, ProveClaim and
    Reclaim resolve an id two tenants use only with the tenant named."""
    s = cluster()
    s.register("w1")
    for tenant in ("alpha", "beta"):
        submit(s.operator, "job-1", tenant)
    proofs = proofs_pb2_grpc.ProofsStub(s.channel)
    calls = [(s.claims.Progress, claims_pb2.ProgressRequest(claim_id="job-1", completed_units=1)),
             (s.claims.Release, claims_pb2.ReleaseRequest(claim_id="job-1")),
             (s.claims.Bind, claims_pb2.BindRequest(claim_id="job-1", dry_run=True)),
             (s.ops.Explain, ops_pb2.ExplainRequest(claim_id="job-1")),
             (s.ops.PreemptionOrder, ops_pb2.PreemptionOrderRequest(for_claim_id="job-1")),
             (proofs.ProveClaim, proofs_pb2.ProveClaimRequest(claim_id="job-1")),
             (s.ops.Reclaim, ops_pb2.ReclaimRequest(claim_ids=["job-1"]))]
    length = s.ops.LedgerHead(ops_pb2.LedgerHeadRequest(), timeout=10).length
    for call, request in calls:
        told = refused(call, request)
        assert told.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert told.details().startswith("AMBIGUOUS_CLAIM: "), (call, told.details())
    assert s.ops.LedgerHead(ops_pb2.LedgerHeadRequest(), timeout=10).length == length   # refused: no receipt
    explained = s.ops.Explain(ops_pb2.ExplainRequest(claim_id="job-1", tenant="beta"), timeout=10)
    assert (explained.claim_id, explained.tenant) == ("job-1", "beta")
    assert s.claims.Progress(claims_pb2.ProgressRequest(claim_id="job-1", tenant="beta", completed_units=2),
                             timeout=10).tenant == "beta"
    released = s.claims.Release(claims_pb2.ReleaseRequest(claim_id="alpha/job-1"), timeout=10)
    assert (released.tenant, released.claim_id, released.state) == ("alpha", "job-1", types_pb2.RELEASED)
    status = s.claims.Get(claims_pb2.GetClaimRequest(claim_id="job-1", tenant="beta"), timeout=10)
    assert status.completed_units == 2 and status.state != types_pb2.RELEASED
    assert not s.ops.Reclaim(ops_pb2.ReclaimRequest(claim_ids=["beta/job-1"]), timeout=10).reclaimed
    conflicting = refused(s.claims.Get, claims_pb2.GetClaimRequest(claim_id="alpha/job-1", tenant="beta"))
    assert conflicting.details().startswith("INVALID_ARGUMENT: ")

    # pool_client: tenant=, and AMBIGUOUS_CLAIM as its own exception
    import pool_client
    with s.operator.library() as client:
        with pytest.raises(pool_client.errors.AmbiguousClaim):
            client.get(claim_id="job-1")
        assert client.get(claim_id="job-1", tenant="beta").tenant == "beta"

    # poolctl: --tenant, or TENANT/ID
    told = s.poolctl("explain", "job-1", check=False)
    assert told.returncode == 1 and told.stderr.startswith("poolctl: AMBIGUOUS_CLAIM: "), told.stderr
    assert s.json("claims", "job-1", "--tenant", "beta")["tenant"] == "beta"
    assert s.json("explain", "job-1", "--tenant", "beta")["tenant"] == "beta"
    assert s.json("progress", "beta/job-1", "3")["completed_units"] == 3
    done = s.json("release", "job-1", "--tenant", "beta")
    assert (done["tenant"], done["state"]) == ("beta", "RELEASED")


def write_as_before_names(s, *specs) -> None:
    """Append submissions to a stopped scheduler's ledger as a scheduler before
    names per tenant wrote them: each claim (and gang) keyed by its bare id."""
    import time

    from scheduler import kernel
    from scheduler.ledger.fold import Fold
    from scheduler.ledger.steward import open_ledger
    from scheduler.service.state import ServiceState, fold_entry

    steward = open_ledger(s.ledger, s.steward, Fold(fold_entry, ServiceState()))
    state = steward.state.kernel
    for spec in specs:
        event = kernel.submit(state, spec, time.time_ns())
        assert isinstance(event, kernel.ClaimSubmitted) and event.spec.claim_id == spec.claim_id
        steward.append(event.kind, event.to_body())
        state = kernel.apply(state, event)
    steward.close()


def test_a_ledger_from_before_names_per_tenant_replays_and_its_claims_keep_their_ids(cluster, harness):
    """Its claims keep their bare keys: found by id and tenant, a resubmission
    meets its claim (no new receipt), a waiting gang takes its tenant's next
    member, another tenant may now use the same ids, and a restart gives the
    same state."""
    from scheduler.kernel import ClaimSpec, Resources

    s = cluster()
    s.register("w1")
    s.stop()
    old = [ClaimSpec("job-1", "alpha", Resources(cpu_millis=1000), estimate_uj=J),
           ClaimSpec("alpha-m1", "alpha", Resources(cpu_millis=1000), estimate_uj=J, gang_id="train-42", gang_size=2)]
    write_as_before_names(s, *old)
    s.start()
    s.register("w1")
    alpha, beta = s.as_principal("alpha"), s.as_principal("beta")

    def get(caller, claim_id="job-1", tenant=""):
        return caller.claims.Get(claims_pb2.GetClaimRequest(claim_id=claim_id, tenant=tenant), timeout=10)

    harness.wait_for("the old job-1 admitted", lambda: get(alpha).state == types_pb2.ADMITTED)
    mine = get(alpha)
    assert (mine.claim_id, mine.tenant, mine.request.claim_id) == ("job-1", "alpha", "job-1")
    length = s.ops.LedgerHead(ops_pb2.LedgerHeadRequest(), timeout=10).length
    assert submit(alpha, "job-1", "alpha") == mine   # the same claim, sent again: no receipt
    assert s.ops.LedgerHead(ops_pb2.LedgerHeadRequest(), timeout=10).length == length
    assert submit(beta, "job-1", "beta").tenant == "beta"
    assert refused(s.claims.Get, claims_pb2.GetClaimRequest(claim_id="job-1")).details().startswith(
        "AMBIGUOUS_CLAIM: ")
    assert get(s.operator, "alpha/job-1") == mine
    # the old waiting gang takes alpha's second member; beta's train-42 is another gang
    assert submit(alpha, "alpha-m2", "alpha", gang="train-42", size=2).gang_id == "train-42"
    assert submit(beta, "beta-m1", "beta", gang="train-42", size=1).gang_id == "train-42"
    harness.wait_for("both gangs admitted", lambda: all(
        get(c, i).state == types_pb2.ADMITTED for c, i in ((alpha, "alpha-m1"), (alpha, "alpha-m2"), (beta, "beta-m1"))))

    every = {(c.tenant, c.claim_id): c for c in s.claims.List(claims_pb2.ListClaimsRequest(), timeout=10).claims}
    s.stop()
    s.start()
    assert {(c.tenant, c.claim_id): c for c in s.claims.List(claims_pb2.ListClaimsRequest(), timeout=10).claims} \
        == every
    assert alpha.claims.Release(claims_pb2.ReleaseRequest(claim_id="job-1"), timeout=10).state == types_pb2.RELEASED
    assert get(beta).state == types_pb2.ADMITTED
