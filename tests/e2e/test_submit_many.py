"""SubmitMany and `poolctl submit --file` (issue 13): claims checked in
order, decided together, answered per claim in order; a refused claim leaves
no receipt and does not stop the others; an identical batch again changes
nothing and gets the same answers."""

from __future__ import annotations

import json

import grpc
import pytest

from protos.limits import SUBMIT_MANY_MAX
from protos.pool.v1 import claims_pb2, ops_pb2, types_pb2

from .conftest import J


def request(claim_id: str, tenant: str = "alpha", **fields) -> claims_pb2.SubmitRequest:
    return claims_pb2.SubmitRequest(claim_id=claim_id, tenant=tenant, estimate_uj=fields.pop("estimate_uj", J),
                                    **fields)


def length(s) -> int:
    return s.ops.LedgerHead(ops_pb2.LedgerHeadRequest(), timeout=10).length


def outcome(result: claims_pb2.SubmitResult) -> tuple:
    if result.WhichOneof("result") == "refused":
        return "refused", types_pb2.ErrorCode.Name(result.refused.code), result.refused.message
    return "status", result.status.claim_id, types_pb2.ClaimState.Name(result.status.state)


def test_a_batch_is_answered_per_claim_in_order_and_refusals_leave_nothing(cluster):
    s = cluster()
    s.register()
    batch = claims_pb2.SubmitManyRequest(claims=[
        request("one"),
        request("ghost", tenant="nobody"),                           # refused: no such tenant
        request("g1", gang_id="g", gang_size=2, resources=types_pb2.Resources(gpu_mdev=500)),
        request("one", estimate_uj=2 * J),                            # refused: same id, another request
        request("g2", gang_id="g", gang_size=2, resources=types_pb2.Resources(gpu_mdev=500)),  # completes the gang
        request("one"),                                               # identical: the first one's answer
        request("huge", tenant="beta", estimate_uj=90_000 * J),       # pending: above the root
    ])
    before = length(s)
    answer = s.claims.SubmitMany(batch, timeout=10)
    assert [outcome(r) for r in answer.results] == [
        ("status", "one", "ADMITTED"),
        ("refused", "UNKNOWN_TENANT", "UNKNOWN_TENANT: tenant 'nobody' is not in the tree"),
        ("status", "g1", "ADMITTED"),
        ("refused", "DUPLICATE_CLAIM", "DUPLICATE_CLAIM: claim 'one' exists with another request"),
        ("status", "g2", "ADMITTED"),
        ("status", "one", "ADMITTED"),
        ("status", "huge", "PENDING"),
    ]
    assert answer.results[6].status.reason != types_pb2.REASON_UNSPECIFIED, "a pending claim says why it waits"
    # four claims submitted, three admitted: nothing for the refused ones
    assert length(s) == before + 4 + 3
    listed = {c.claim_id for c in s.claims.List(claims_pb2.ListClaimsRequest(), timeout=10).claims}
    assert listed == {"one", "g1", "g2", "huge"}

    again = s.claims.SubmitMany(batch, timeout=10)
    assert [outcome(r) for r in again.results] == [outcome(r) for r in answer.results]
    assert [r.status for r in again.results] == [r.status for r in answer.results]
    assert length(s) == before + 7, "an identical batch again records nothing"


def test_too_many_claims_refuse_the_whole_call(cluster):
    s = cluster()
    before = length(s)
    batch = claims_pb2.SubmitManyRequest(claims=[request(f"c{i}") for i in range(SUBMIT_MANY_MAX + 1)])
    with pytest.raises(grpc.RpcError) as error:
        s.claims.SubmitMany(batch, timeout=10)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details() == f"INVALID_ARGUMENT: claims: at most {SUBMIT_MANY_MAX} claims per call, got 1001"
    assert length(s) == before
    assert not s.claims.List(claims_pb2.ListClaimsRequest(), timeout=10).claims


def test_poolctl_submit_file(cluster, tmp_path):
    s = cluster()
    s.register()
    lines = [{"claim_id": f"f{i}", "tenant": "alpha", "estimate_uj": J, "resources": {"cpu_millis": 100}}
             for i in range(3)]
    lines.insert(1, {"claim_id": "bad", "tenant": "nobody", "estimate_uj": J})
    path = tmp_path / "claims.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    done = s.poolctl("submit", "--file", str(path), "-o", "json", check=False)
    assert done.returncode == 1
    assert done.stderr == "poolctl: line 2: UNKNOWN_TENANT: tenant 'nobody' is not in the tree\n"
    results = json.loads(done.stdout)["results"]
    assert [r["status"]["claim_id"] if r["status"] else r["refused"]["code"] for r in results] == [
        "f0", "UNKNOWN_TENANT", "f1", "f2"]
    assert {c["claim_id"]: c["state"] for c in s.json("claims")["claims"]} == dict.fromkeys(("f0", "f1", "f2"),
                                                                                           "ADMITTED")
    table = s.poolctl("submit", "--file", str(path), check=False)   # again: the same answers, nothing new
    assert table.returncode == 1 and [line.split()[0] for line in table.stdout.splitlines()[2:]] == ["f0", "f1", "f2"]

    path.write_text('{"claim_id": "x", "tenant": "alpha"}\nnot json\n')
    bad = s.poolctl("submit", "--file", str(path), check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("poolctl: INVALID_ARGUMENT: line 2: ")
    assert "x" not in {c["claim_id"] for c in s.json("claims")["claims"]}, "nothing is sent from a bad file"
