"""Who may connect at all: mutual TLS with the configured CA, certificates
that are valid now, principals that SIGHUP can remove, insecure mode only on
loopback; and the actor every receipt records."""

from __future__ import annotations

import datetime
import os
import subprocess
import urllib.request

import grpc
import pytest

from protos.pool.v1 import claims_pb2, claims_pb2_grpc, ops_pb2
from scheduler.ctl import certs
from scheduler.ledger import export, keys
from scheduler.ledger.witness import sign_statement
from scheduler.ledger.verify import verify

from .conftest import BIN, free_port, wait_for


def _submit(stub, claim_id: str, tenant: str = "alpha"):
    return stub.Submit(claims_pb2.SubmitRequest(claim_id=claim_id, tenant=tenant, estimate_uj=5), timeout=10)


def _refused(channel: grpc.Channel) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        _submit(claims_pb2_grpc.ClaimsStub(channel), "x")
    return caught.value


def test_plaintext_to_the_tls_port_is_refused(cluster):
    s = cluster()
    error = _refused(grpc.insecure_channel(s.address))
    assert error.code() == grpc.StatusCode.UNAVAILABLE


def test_a_certificate_from_another_ca_is_refused(cluster, tmp_path):
    s = cluster()
    other = tmp_path / "other-ca"
    certs.make_ca(other)
    certs.make_client(other, "alpha")   # the right name, signed by the wrong CA
    credentials = grpc.ssl_channel_credentials(s.pki.ca.read_bytes(), (other / "alpha.key").read_bytes(),
                                               (other / "alpha.pem").read_bytes())
    assert _refused(grpc.secure_channel(s.address, credentials)).code() == grpc.StatusCode.UNAVAILABLE


def test_an_expired_certificate_is_refused(cluster):
    s = cluster()
    long_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=30)
    certs.issue(s.pki.dir, "expired", "alpha", days=1, not_before=long_ago)
    credentials = grpc.ssl_channel_credentials(s.pki.ca.read_bytes(), (s.pki.dir / "expired.key").read_bytes(),
                                               (s.pki.dir / "expired.pem").read_bytes())
    assert _refused(grpc.secure_channel(s.address, credentials)).code() == grpc.StatusCode.UNAVAILABLE


def test_no_client_certificate_is_refused(cluster):
    s = cluster()
    credentials = grpc.ssl_channel_credentials(s.pki.ca.read_bytes())
    assert _refused(grpc.secure_channel(s.address, credentials)).code() == grpc.StatusCode.UNAVAILABLE


def test_a_principal_removed_and_sighup_is_refused_without_a_restart(cluster):
    s = cluster()
    alpha = s.as_principal("alpha")
    _submit(alpha.claims, "before")
    pid = s.process.pid
    s.config.write_text(s.config.read_text().replace('[principals."alpha"]\nrole = "tenant"\ntenants = ["alpha"]', ""))
    s.reload()

    def refused() -> bool:
        try:
            _submit(alpha.claims, "after")
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.UNAUTHENTICATED
            return error.details().startswith("UNKNOWN_PRINCIPAL: 'alpha'")
        return False

    wait_for("alpha to be refused", refused, 20)
    assert s.process.pid == pid and s.process.poll() is None
    assert s.claims.Get(claims_pb2.GetClaimRequest(claim_id="before")).state   # nothing else changed


def test_a_reload_with_a_bad_configuration_changes_nothing(cluster):
    s = cluster()
    s.config.write_text(s.config.read_text() + '\n[principals.eve]\nrole = "emperor"\n')
    s.reload()
    wait_for("the reload to be refused", lambda: "reload refused" in s.log(), 20)
    _submit(s.as_principal("alpha").claims, "still")
    assert s.process.poll() is None


def test_the_actor_of_each_receipt_is_the_caller(cluster):
    s = cluster()
    s.register("w1")
    s.as_principal("alpha").poolctl("submit", "c1", "--tenant", "alpha", "--estimate-uj", "10")
    s.poolctl("release", "c1")
    status = s.json("claims")["claims"][0]
    assert (status["submitted_by"], status["released_by"]) == ("alpha", "operator")
    s.stop()
    s.start()   # replayed from the ledger
    status = s.json("claims")["claims"][0]
    assert (status["submitted_by"], status["released_by"]) == ("alpha", "operator")
    table = s.poolctl("claims", "-o", "wide").stdout
    assert "submitted by" in table and "alpha" in table
    blob = b"".join(c.receipts for c in s.ops.LedgerExport(ops_pb2.LedgerExportRequest()))
    actors = [e.actor for e in _entries(blob)]
    assert actors[0] is None   # genesis: the ledger's own
    assert {"w1", "alpha", "operator"} <= set(actors)


def _entries(blob: bytes) -> list:
    seen = []
    report = verify(export.split(blob), on_entry=seen.append)
    assert report.valid
    return seen


def test_insecure_mode_serves_loopback_with_a_warning_and_a_metric(cluster):
    port = free_port()
    s = cluster(insecure=True, metrics=f"127.0.0.1:{port}")
    s.register("w1")
    s.poolctl("submit", "c1", "--tenant", "alpha", "--estimate-uj", "10")
    assert s.json("claims")["claims"][0]["submitted_by"] == "insecure"
    assert "INSECURE MODE" in s.log()
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert "pool_insecure_mode 1.0" in text


def test_insecure_mode_on_a_routable_address_is_refused_at_start(tmp_path):
    config = tmp_path / "s.toml"
    config.write_text(f'[server]\ninsecure = true\nlisten = "0.0.0.0:{free_port()}"\n'
                      '[[tenants]]\nname = "root"\n')
    done = subprocess.run([str(BIN / "pool-scheduler"), "--config", str(config)], capture_output=True, text=True,
                          timeout=60, env={**os.environ})
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "may only listen on a loopback address" in done.stderr


def test_a_steward_key_readable_by_others_is_refused_with_the_fix(cluster):
    s = cluster()
    s.stop()
    key = s.dir / "steward.key"
    key.chmod(0o644)
    done = subprocess.run([str(BIN / "pool-scheduler"), "--config", str(s.config)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "accessible by group or others (mode 0644)" in line and f"chmod 600 {key}" in line


def test_record_witness_takes_only_a_trusted_key(cluster):
    s = cluster()
    s.register("w1")
    witness_stub = s.as_principal("witness").ops
    info = s.ops.LedgerHead(ops_pb2.LedgerHeadRequest())
    steward = s.steward.public

    def statement(key) -> bytes:
        return sign_statement(key, steward, info.ledger_id, info.length, info.head)

    with pytest.raises(grpc.RpcError) as caught:
        witness_stub.RecordWitness(ops_pb2.RecordWitnessRequest(witness_receipt=statement(keys.generate())))
    assert caught.value.details().startswith("WITNESS_REJECTED: untrusted_key: ")
    assert s.ops.LedgerHead(ops_pb2.LedgerHeadRequest()).length == info.length
    recorded = witness_stub.RecordWitness(ops_pb2.RecordWitnessRequest(witness_receipt=statement(s.witness_key)))
    assert recorded.witnessed_length == info.length
    blob = b"".join(c.receipts for c in s.ops.LedgerExport(ops_pb2.LedgerExportRequest()))
    assert _entries(blob)[-1].actor == "witness"


def test_poolctl_certs_makes_a_pki_with_private_keys_and_never_overwrites(tmp_path):
    def certs(*args):
        return subprocess.run([str(BIN / "poolctl"), "certs", *args, "--dir", str(tmp_path / "pki"), "-o", "json"],
                              capture_output=True, text=True, timeout=60)

    for args in (("ca",), ("server", "--host", "127.0.0.1", "--host", "sched.example"), ("agent", "--host", "gpu-01"),
                 ("client", "--principal", "ops-alice")):
        done = certs(*args)
        assert done.returncode == 0, done.stderr
    for name in ("ca", "server", "gpu-01", "ops-alice"):
        assert (tmp_path / "pki" / f"{name}.key").stat().st_mode & 0o777 == 0o600
    before = (tmp_path / "pki" / "ops-alice.pem").read_bytes()
    again = certs("client", "--principal", "ops-alice")
    assert again.returncode == 2 and "nothing is overwritten" in again.stderr
    assert (tmp_path / "pki" / "ops-alice.pem").read_bytes() == before


def test_poolctl_takes_its_credentials_as_flags(cluster):
    s = cluster()
    cert, key = s.pki.files("auditor")
    env = {k: v for k, v in os.environ.items() if not k.startswith("POOL_")}
    flags = ["--scheduler", s.address, "--ca", str(s.pki.ca), "--cert", str(cert), "--key", str(key)]
    done = subprocess.run([str(BIN / "poolctl"), "claims", *flags], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([str(BIN / "poolctl"), "reclaim", *flags], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 1 and done.stderr.startswith("poolctl: ROLE_NOT_ALLOWED: auditor has role auditor")
    done = subprocess.run([str(BIN / "poolctl"), "claims", "--scheduler", s.address, "--cert", str(cert)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and "need --ca" in done.stderr


def test_sighup_swaps_the_tls_files_for_new_connections(cluster, tmp_path):
    s = cluster()
    before = s.as_principal("alpha")
    _submit(before.claims, "old-ca")   # a connection made under the first CA
    fresh = tmp_path / "new-ca"
    certs.make_ca(fresh)
    certs.make_server(fresh, ("127.0.0.1",))
    certs.make_client(fresh, "alpha")
    text = s.config.read_text()
    for name in ("server.pem", "server.key", "ca.pem"):
        text = text.replace(str(s.pki.dir / name), str(fresh / name))
    s.config.write_text(text)
    s.reload()

    def connect(directory):
        credentials = grpc.ssl_channel_credentials((directory / "ca.pem").read_bytes(),
                                                   (directory / "alpha.key").read_bytes(),
                                                   (directory / "alpha.pem").read_bytes())
        return claims_pb2_grpc.ClaimsStub(grpc.secure_channel(s.address, credentials))

    def new_ca_serves() -> bool:
        try:
            _submit(connect(fresh), "new-ca")
            return True
        except grpc.RpcError:
            return False

    wait_for("a connection under the new CA", new_ca_serves, 20)
    with pytest.raises(grpc.RpcError) as caught:   # a new connection under the old CA: refused at the handshake
        _submit(connect(s.pki.dir), "old-again")
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_tenant_of_several_subtrees_names_one_to_read(cluster):
    s = cluster(extra='[principals.both]\nrole = "tenant"\ntenants = ["alpha", "beta"]\n')
    both = s.as_principal("both")
    _submit(both.claims, "b1", "beta")
    assert [c["claim_id"] for c in both.json("claims", "--tenant", "beta")["claims"]] == ["b1"]
    assert both.poolctl("claims", check=False).stderr.startswith("poolctl: OUT_OF_SCOPE: both may act only in "
                                                                 "alpha, beta: name one of them in tenant")
