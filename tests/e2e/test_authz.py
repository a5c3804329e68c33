"""The authorization table, enforced: every RPC × every role over real mTLS
against a real scheduler, generated from scheduler/service/authz.TABLE and
the service descriptors, so an RPC without a row fails here."""

from __future__ import annotations

import re
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from protos.pool.v1 import agent_pb2, claims_pb2, ops_pb2, proofs_pb2, types_pb2
from scheduler.service.authz import ANYONE, TABLE, markdown, proto_comment
from scheduler.service.errors import STATUS

# one principal per role (the harness declares them); "mallory" has a certificate from the same CA
# but no [principals.mallory]
CALLERS = {"operator": "operator", "auditor": "auditor", "witness": "witness", "tenant": "alpha", "agent": "w1"}
SERVICES = [claims_pb2.DESCRIPTOR.services_by_name["Claims"], ops_pb2.DESCRIPTOR.services_by_name["Operations"],
            agent_pb2.DESCRIPTOR.services_by_name["AgentService"], health_pb2.DESCRIPTOR.services_by_name["Health"],
            proofs_pb2.DESCRIPTOR.services_by_name["Proofs"]]
METHODS = {f"/{s.full_name}/{m.name}": m for s in SERVICES for m in s.methods}


def test_every_rpc_has_exactly_one_row():
    assert set(METHODS) == set(TABLE), "add a row to scheduler/service/authz.TABLE for every RPC"


def test_every_refusal_code_is_in_the_status_table():
    for code, status in (("NO_CLIENT_CERTIFICATE", "UNAUTHENTICATED"), ("UNKNOWN_PRINCIPAL", "UNAUTHENTICATED"),
                         ("ROLE_NOT_ALLOWED", "PERMISSION_DENIED"), ("OUT_OF_SCOPE", "PERMISSION_DENIED")):
        assert STATUS[code].name == status
        assert types_pb2.ErrorCode.Value(code) >= 100


def _requests(method: str, claim: str, tenant: str, host: str) -> list:
    """Request messages that are in scope for a caller of tenant `tenant` / host `host`."""
    request = {
        "Submit": lambda: claims_pb2.SubmitRequest(claim_id=f"{claim}-new", tenant=tenant, estimate_uj=5),
        "SubmitMany": lambda: claims_pb2.SubmitManyRequest(claims=[claims_pb2.SubmitRequest(
            claim_id=f"{claim}-many", tenant=tenant, estimate_uj=5)]),
        "Progress": lambda: claims_pb2.ProgressRequest(claim_id=claim, completed_units=1),
        "Release": lambda: claims_pb2.ReleaseRequest(claim_id=claim),
        "Get": lambda: claims_pb2.GetClaimRequest(claim_id=claim),
        "List": lambda: claims_pb2.ListClaimsRequest(tenant=tenant),
        "Watch": lambda: claims_pb2.WatchRequest(claim_id=claim),
        "Explain": lambda: ops_pb2.ExplainRequest(claim_id=claim),
        "Splits": lambda: ops_pb2.SplitsRequest(tenant=tenant),
        "Estimate": lambda: ops_pb2.EstimateRequest(work_class="none"),
        "Register": lambda: agent_pb2.RegisterRequest(host_id=host),
        "Stream": lambda: agent_pb2.AgentMessage(hello=agent_pb2.Hello(host_id=host)),
        "RecordWitness": lambda: ops_pb2.RecordWitnessRequest(witness_receipt=b"\x00"),
        "Plan": lambda: claims_pb2.PlanRequest(claims=[claims_pb2.SubmitRequest(
            claim_id=f"{claim}-plan", tenant=tenant, estimate_uj=5)]),
        "Cordon": lambda: ops_pb2.CordonRequest(worker=host, cordoned=False),   # as it is: no receipt
        "ProveClaim": lambda: proofs_pb2.ProveClaimRequest(claim_id=claim),
        "ProveSubtree": lambda: proofs_pb2.ProveSubtreeRequest(tenant=tenant),
        "AddCosignature": lambda: proofs_pb2.AddCosignatureRequest(note=b"x"),
    }
    m = METHODS[method]
    made = request.get(m.name) if m.containing_service.name != "Health" else None
    # otherwise a request without fields that matter to the table (health's, TenantsRequest, ...)
    return [made() if made else m.input_type._concrete_class()]


def _call(caller, method: str, requests: list) -> grpc.StatusCode | None:
    """The call's status code (None: it answered); streams are read for a moment."""
    m = METHODS[method]
    serialize, deserialize = (lambda r: r.SerializeToString()), m.output_type._concrete_class.FromString
    try:
        if m.client_streaming:
            call = caller.channel.stream_stream(method, serialize, deserialize)
            for _ in call(iter(requests), timeout=3):
                pass
        elif m.server_streaming:
            call = caller.channel.unary_stream(method, serialize, deserialize)
            for _ in call(requests[0], timeout=3):
                break
        else:
            caller.channel.unary_unary(method, serialize, deserialize)(requests[0], timeout=10)
    except grpc.RpcError as error:
        return error
    return None


def _length(s) -> int:
    return s.ops.LedgerHead(ops_pb2.LedgerHeadRequest()).length


def test_the_matrix_every_rpc_by_every_role(cluster):
    s = cluster()
    s.register("w1")
    s.as_principal("alpha").claims.Submit(claims_pb2.SubmitRequest(claim_id="a1", tenant="alpha", estimate_uj=5))
    s.as_principal("beta").claims.Submit(claims_pb2.SubmitRequest(claim_id="b1", tenant="beta", estimate_uj=5))
    failures = []
    for method, rule in sorted(TABLE.items()):
        for role, name in CALLERS.items():
            before = _length(s)
            error = _call(s.as_principal(name), method, _requests(method, "a1", "alpha", "w1"))
            refused = error is not None and error.code() in (grpc.StatusCode.PERMISSION_DENIED,
                                                            grpc.StatusCode.UNAUTHENTICATED)
            allowed = ANYONE in rule.roles or role in rule.roles
            if allowed and refused:
                failures.append(f"{method} as {role}: refused {error.details()}")
            if not allowed:
                if not (refused and error.details().startswith("ROLE_NOT_ALLOWED: ")):
                    failures.append(f"{method} as {role}: {error and error.details()!r}, not ROLE_NOT_ALLOWED")
                if _length(s) != before:
                    failures.append(f"{method} as {role}: refused but left a receipt")
        # the tenant outside its scope (beta's claim, beta's subtree) and an agent for another host
        if ANYONE not in rule.roles and rule.scope is not None:
            role = rule.scope.binds
            before = _length(s)
            error = _call(s.as_principal(CALLERS[role]), method, _requests(method, "b1", "beta", "w2"))
            # another tenant's claim is answered as an unknown id is (issue 21: ids are not disclosed)
            claim_scoped = "claim_id is in" in rule.scope.says or method == "/pool.v1.Claims/Watch"   # (of b1)
            expected = "UNKNOWN_CLAIM: no claim 'b1'" if claim_scoped else "OUT_OF_SCOPE: "
            if error is None or not error.details().startswith(expected):
                failures.append(f"{method} as {role} out of scope: {error and error.details()!r}")
            if _length(s) != before:
                failures.append(f"{method} as {role} out of scope: left a receipt")
        # a certificate from the right CA for a name nobody declared
        error = _call(s.as_principal("mallory"), method, _requests(method, "a1", "alpha", "mallory"))
        if ANYONE not in rule.roles and (error is None or not error.details().startswith("UNKNOWN_PRINCIPAL: ")
                                         or error.code() != grpc.StatusCode.UNAUTHENTICATED):
            failures.append(f"{method} as an undeclared CN: {error and error.details()!r}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("attack", ["submit for beta", "release beta's", "progress beta's", "explain beta's",
                                    "watch beta", "splits of beta", "reclaim", "export the ledger",
                                    "register a host", "stream as a host", "record a witness", "workers",
                                    "list beta's claims"])
def test_the_attacks_with_a_tenants_credentials_are_refused(cluster, attack):
    s = cluster()
    s.register("w1")
    s.as_principal("beta").claims.Submit(claims_pb2.SubmitRequest(claim_id="b1", tenant="beta", estimate_uj=5))
    alpha = s.as_principal("alpha")
    call = {
        "submit for beta": lambda: alpha.claims.Submit(claims_pb2.SubmitRequest(
            claim_id="x", tenant="beta", estimate_uj=5)),
        "release beta's": lambda: alpha.claims.Release(claims_pb2.ReleaseRequest(claim_id="b1")),
        "progress beta's": lambda: alpha.claims.Progress(claims_pb2.ProgressRequest(claim_id="b1", completed_units=1)),
        "explain beta's": lambda: alpha.ops.Explain(ops_pb2.ExplainRequest(claim_id="b1")),
        "watch beta": lambda: next(alpha.claims.Watch(claims_pb2.WatchRequest(tenant="beta"), timeout=5)),
        "splits of beta": lambda: alpha.ops.Splits(ops_pb2.SplitsRequest(tenant="beta")),
        "reclaim": lambda: alpha.ops.Reclaim(ops_pb2.ReclaimRequest()),
        "export the ledger": lambda: next(alpha.ops.LedgerExport(ops_pb2.LedgerExportRequest(), timeout=5)),
        "register a host": lambda: alpha.agents.Register(agent_pb2.RegisterRequest(host_id="w9")),
        "stream as a host": lambda: list(alpha.channel.stream_stream(
            "/pool.v1.AgentService/Stream", lambda m: m.SerializeToString(), agent_pb2.SchedulerMessage.FromString)(
            iter([agent_pb2.AgentMessage(hello=agent_pb2.Hello(host_id="w1"))]), timeout=5)),
        "list beta's claims": lambda: alpha.claims.List(claims_pb2.ListClaimsRequest(tenant="beta")),
        "record a witness": lambda: alpha.ops.RecordWitness(ops_pb2.RecordWitnessRequest(witness_receipt=b"x")),
        "workers": lambda: alpha.ops.Workers(ops_pb2.WorkersRequest()),
    }[attack]
    before, b1 = _length(s), s.claims.Get(claims_pb2.GetClaimRequest(claim_id="b1"))
    with pytest.raises(grpc.RpcError) as caught:
        call()
    if attack in ("release beta's", "progress beta's", "explain beta's"):   # as if b1 did not exist
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND, caught.value.details()
        assert caught.value.details() == "UNKNOWN_CLAIM: no claim 'b1'"
    else:
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED, caught.value.details()
        assert caught.value.details().split(":")[0] in ("OUT_OF_SCOPE", "ROLE_NOT_ALLOWED")
    assert _length(s) == before
    assert s.claims.Get(claims_pb2.GetClaimRequest(claim_id="b1")) == b1


def test_a_tenants_reads_are_narrowed_to_its_subtree(cluster):
    s = cluster()
    s.register("w1")
    for tenant in ("alpha", "beta"):
        s.as_principal(tenant).claims.Submit(claims_pb2.SubmitRequest(claim_id=f"{tenant}-1", tenant=tenant,
                                                                      estimate_uj=5))
    alpha = s.as_principal("alpha")
    assert [c["claim_id"] for c in alpha.json("claims")["claims"]] == ["alpha-1"]
    assert [c["claim_id"] for c in s.json("claims")["claims"]] == ["alpha-1", "beta-1"]   # the operator: all
    assert [n["name"] for n in alpha.json("tenants")["tenants"]] == ["alpha"]
    assert alpha.json("splits")["totals"] == []
    assert alpha.poolctl("claims", "--tenant", "root", check=False).stderr.startswith("poolctl: OUT_OF_SCOPE: ")
    first = next(alpha.claims.Watch(claims_pb2.WatchRequest(), timeout=5))
    assert first.status.claim_id == "alpha-1"


def test_an_agent_acts_only_as_its_own_host(cluster):
    s = cluster()
    w1 = s.as_principal("w1")
    with pytest.raises(grpc.RpcError) as caught:
        w1.agents.Register(agent_pb2.RegisterRequest(host_id="w2"), timeout=10)
    assert caught.value.details().startswith("OUT_OF_SCOPE: agent 'w1' may act only as host 'w1', not 'w2'")
    s.register("w2")
    with pytest.raises(grpc.RpcError) as caught:   # streaming forged windows for w2 with w1's certificate
        for _ in w1.agents.Stream(iter([agent_pb2.AgentMessage(hello=agent_pb2.Hello(host_id="w2"))]), timeout=10):
            pass
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert caught.value.details().startswith("OUT_OF_SCOPE: ")


def test_the_proto_comments_and_the_docs_print_the_table():
    root = Path(__file__).resolve().parents[2]
    for name, service in (("claims", "Claims"), ("ops", "Operations"), ("agent", "AgentService"),
                          ("proofs", "Proofs")):
        lines = (root / "protos" / "pool" / "v1" / f"{name}.proto").read_text().splitlines()
        for i, line in enumerate(lines):
            if (rpc := re.match(r"\s*rpc (\w+)\(", line)):
                assert lines[i - 1].strip() == proto_comment(f"/pool.v1.{service}/{rpc.group(1)}"), line
    assert markdown() in (root / "docs" / "OPERATIONS.md").read_text()
