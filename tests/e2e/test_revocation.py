"""Revocation that cuts, and reloads that check what they load (issue 21
item 5), over mutual TLS against a real scheduler: a SIGHUP that removes a
principal or narrows its reach ends its open Watches and Streams at once with
the code its next call would get; a reload with a key that is not the
certificate's, or a client CA that does not parse, is refused and the old
files stay in force; a certificate CN with a control character names nobody."""

from __future__ import annotations

import queue
import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.pool.v1 import agent_pb2, claims_pb2, claims_pb2_grpc
from scheduler.ctl import certs

ALPHA = '[principals."alpha"]\nrole = "tenant"\ntenants = ["alpha"]\n'
W1 = '[principals."w1"]\nrole = "agent"\n'
CUT_S = 1.0   # the rule: an open stream ends within this of the reload


def ends(stream) -> tuple[grpc.RpcError | None, list]:
    """Read a stream to its end in a thread: (the error it ended with, what it said)."""
    out: dict = {"error": None, "said": []}

    def read() -> None:
        try:
            for message in stream:
                out["said"].append(message)
        except grpc.RpcError as error:
            out["error"] = error
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, out


def reload_with(s, old: str, new: str) -> float:
    text = s.config.read_text()
    assert old in text
    s.config.write_text(text.replace(old, new))
    sent = time.monotonic()
    s.reload()
    return sent


def test_removing_or_narrowing_a_principal_ends_its_open_streams(cluster, harness):
    s = cluster()
    alpha, beta = s.as_principal("alpha"), s.as_principal("beta")
    alpha.claims.Submit(claims_pb2.SubmitRequest(claim_id="a1", tenant="alpha", estimate_uj=1), timeout=10)
    beta.claims.Submit(claims_pb2.SubmitRequest(claim_id="b1", tenant="beta", estimate_uj=1), timeout=10)
    s.register("w1")
    watch = alpha.claims.Watch(claims_pb2.WatchRequest(tenant="alpha"), timeout=60)
    kept = beta.claims.Watch(claims_pb2.WatchRequest(tenant="beta"), timeout=60)
    assert next(watch).status.claim_id == "a1" and next(kept).status.claim_id == "b1"
    up: queue.Queue = queue.Queue()
    up.put(agent_pb2.AgentMessage(hello=agent_pb2.Hello(host_id="w1")))
    stream = s.agents.Stream(iter(up.get, None), timeout=60)
    assert next(stream).WhichOneof("body") == "occupancy"
    watching, watched = ends(watch)
    streaming, streamed = ends(stream)

    # alpha narrowed to beta: its Watch of alpha is out of its scope now
    sent = reload_with(s, ALPHA, '[principals."alpha"]\nrole = "tenant"\ntenants = ["beta"]\n')
    watching.join(timeout=30)
    assert time.monotonic() - sent < CUT_S + 1   # (the signal's delivery and the file's load included)
    assert watched["error"].code() == grpc.StatusCode.PERMISSION_DENIED
    assert watched["error"].details().startswith("OUT_OF_SCOPE")

    # the agent w1 removed: its Stream ends as its next call would, UNKNOWN_PRINCIPAL
    sent = reload_with(s, W1, "")
    streaming.join(timeout=30)
    assert time.monotonic() - sent < CUT_S + 1
    assert streamed["error"].code() == grpc.StatusCode.UNAUTHENTICATED
    assert streamed["error"].details().startswith("UNKNOWN_PRINCIPAL: 'w1'")
    up.put(None)

    # beta, untouched, still hears of its claims
    beta.claims.Release(claims_pb2.ReleaseRequest(claim_id="b1"), timeout=10)
    assert next(kept).status.claim_id == "b1"
    kept.cancel()


def _refused_reload(s, harness, reason: str, ca: bytes) -> None:
    before = s.log().count("reload refused")
    s.reload()
    harness.wait_for("the reload to be refused", lambda: s.log().count("reload refused") > before)
    assert reason in s.log().split("reload refused")[-1]
    # a new connection still gets the old, good credentials
    cert, key = s.pki.files("auditor")
    channel = grpc.secure_channel(s.address, grpc.ssl_channel_credentials(ca, key.read_bytes(), cert.read_bytes()))
    health = health_pb2_grpc.HealthStub(channel)
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == health_pb2.HealthCheckResponse.SERVING
    channel.close()


def test_a_reload_with_a_key_not_the_certificates_or_a_garbage_ca_is_refused(cluster, harness, tmp_path):
    s = cluster()
    good_ca = s.pki.ca.read_bytes()
    key_file = tmp_path / "pki" / "server.key"
    good_key = key_file.read_bytes()
    other = tmp_path / "other"
    other.mkdir()
    certs.make_ca(other)
    key_file.write_bytes((other / "ca.key").read_bytes())   # a well-formed key, not the certificate's
    _refused_reload(s, harness, "is not the key of server.tls.cert", good_ca)
    key_file.write_bytes(good_key)
    ca_file = tmp_path / "pki" / "ca.pem"
    ca_file.write_bytes(b"-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n")
    _refused_reload(s, harness, "server.tls.client_ca", good_ca)
    ca_file.write_bytes(good_ca)


def test_a_common_name_with_a_control_character_names_nobody(cluster):
    s = cluster()
    pki = s.pki.dir
    certs.issue(pki, "sneaky", "alpha\x00ops")
    credentials = grpc.ssl_channel_credentials(s.pki.ca.read_bytes(), (pki / "sneaky.key").read_bytes(),
                                               (pki / "sneaky.pem").read_bytes())
    channel = grpc.secure_channel(s.address, credentials)
    stub = claims_pb2_grpc.ClaimsStub(channel)
    try:
        stub.List(claims_pb2.ListClaimsRequest(), timeout=10)
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED, error
        assert error.details().startswith("UNKNOWN_PRINCIPAL")
    else:
        raise AssertionError("a CN 'alpha\\0ops' was let in as alpha")
    channel.close()
