"""Bad input gets a clear error with a stable code and changes nothing:
no receipt, no state (issue 6)."""

from __future__ import annotations

import time

import grpc
import pytest

from protos.pool.v1 import agent_pb2, claims_pb2, ops_pb2, types_pb2


SECOND = 1_000_000_000


def submit(**fields) -> claims_pb2.SubmitRequest:
    base = dict(claim_id="c1", tenant="alpha", estimate_uj=1_000_000, resources=types_pb2.Resources(cpu_millis=10))
    return claims_pb2.SubmitRequest(**{**base, **fields})


def refused(call, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call(request, timeout=10)
    return caught.value


def ledger_length(s) -> int:
    return s.ops.LedgerHead(ops_pb2.LedgerHeadRequest()).length


@pytest.mark.parametrize("fields, field", [
    (dict(claim_id="bad id!"), "claim_id"),
    (dict(resources=types_pb2.Resources(gpu_mdev=1500)), "resources.gpu_mdev"),
    (dict(resources=types_pb2.Resources(gpu_types=["NVIDIA H200"])), "resources.gpu_types"),
    (dict(estimate_uj=None), "estimate_uj"),
    (dict(gang_id="g", gang_size=0), "gang_size"),
])
def test_invalid_claim_names_the_field_and_leaves_no_receipt(cluster, fields, field):
    s = cluster()
    before = ledger_length(s)
    request = submit(**{k: v for k, v in fields.items() if v is not None})
    if "estimate_uj" in fields:
        request.ClearField("estimate_uj")
    error = refused(s.claims.Submit, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith(f"INVALID_CLAIM: {field}:"), error.details()
    assert ledger_length(s) == before
    assert s.json("claims")["claims"] == []


def test_unknown_tenant_unknown_claim_and_class(cluster):
    s = cluster()
    before = ledger_length(s)
    assert refused(s.claims.Submit, submit(tenant="nobody")).code() == grpc.StatusCode.NOT_FOUND
    assert refused(s.claims.Release, claims_pb2.ReleaseRequest(claim_id="nope")).code() == grpc.StatusCode.NOT_FOUND
    error = refused(s.claims.Submit, submit(work_class="unknown"))
    assert error.code() == grpc.StatusCode.NOT_FOUND and error.details().startswith("UNKNOWN_WORK_CLASS")
    assert ledger_length(s) == before


def test_repeated_claim_id_returns_the_original_answer_or_already_exists(cluster):
    s = cluster()
    first = s.claims.Submit(submit(), timeout=10)
    length = ledger_length(s)
    again = s.claims.Submit(submit(), timeout=10)
    assert again == first and ledger_length(s) == length
    error = refused(s.claims.Submit, submit(estimate_uj=2_000_000))
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS and error.details().startswith("DUPLICATE_CLAIM")
    assert ledger_length(s) == length


def test_settled_claims_refuse_progress_and_release(cluster):
    """A Release sent again by whoever released the claim answers the released
    status and records nothing (its first answer may have been lost); anyone
    else's Release, and any Progress, is refused."""
    s = cluster()
    s.claims.Submit(submit(), timeout=10)
    released = s.claims.Release(claims_pb2.ReleaseRequest(claim_id="c1"), timeout=10)
    length = ledger_length(s)
    assert s.claims.Release(claims_pb2.ReleaseRequest(claim_id="c1"), timeout=10) == released
    assert ledger_length(s) == length
    error = refused(s.as_principal("alpha").claims.Release, claims_pb2.ReleaseRequest(claim_id="c1"))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION and error.details().startswith("CLAIM_NOT_OPEN")
    error = refused(s.claims.Progress, claims_pb2.ProgressRequest(claim_id="c1", completed_units=1))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_poolctl_prints_one_line_with_the_servers_code(cluster):
    s = cluster()
    done = s.poolctl("submit", "c9", "--tenant", "nobody", "--estimate-uj", "5", check=False)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == ["poolctl: UNKNOWN_TENANT: tenant 'nobody' is not in the tree"]


def _stream(s, *messages):
    responses = s.agents.Stream(iter(messages), timeout=10)
    with pytest.raises(grpc.RpcError) as caught:
        for _ in responses:
            pass
    return caught.value


def test_window_from_an_unregistered_agent_is_refused(cluster):
    s = cluster()
    before = ledger_length(s)
    error = _stream(s, agent_pb2.AgentMessage(hello=agent_pb2.Hello(host_id="ghost")))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error.details().startswith("UNREGISTERED_AGENT")
    assert ledger_length(s) == before


def test_a_window_whose_shares_do_not_add_up_is_refused_whole(cluster):
    s = cluster()
    s.agents.Register(agent_pb2.RegisterRequest(host_id="h1", devices=[
        types_pb2.DeviceMeter(device_id="GPU-1", kind=types_pb2.GPU, device_type="NVIDIA H200")]), timeout=10)
    t = time.time_ns() - 10 * SECOND
    good = agent_pb2.Window(device_id="GPU-1", seq=1, start_ns=t, end_ns=t + SECOND, uj=10,
                            grade=types_pb2.GRADE_HW_SHUNT,
                            shares=[types_pb2.Share(occupant="unallocated", uj=10, grade=types_pb2.GRADE_HW_SHUNT)])
    bad = agent_pb2.Window(device_id="GPU-1", seq=2, start_ns=t + SECOND, end_ns=t + 2 * SECOND, uj=10,
                           grade=types_pb2.GRADE_HW_SHUNT,
                           shares=[types_pb2.Share(occupant="unallocated", uj=9, grade=types_pb2.GRADE_HW_SHUNT)])
    error = _stream(s, agent_pb2.AgentMessage(hello=agent_pb2.Hello(host_id="h1")),
                    agent_pb2.AgentMessage(batch=agent_pb2.WindowBatch(windows=[good, bad])))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("INVALID_WINDOW: window seq 2"), error.details()
    assert s.agents.Register(agent_pb2.RegisterRequest(host_id="h1", devices=[
        types_pb2.DeviceMeter(device_id="GPU-1", kind=types_pb2.GPU, device_type="NVIDIA H200")]),
        timeout=10).acked_seq == 0
    assert s.json("splits")["rows"] == []
