"""Done when (issue 24): a tenant with only its own certificate proves, from a
real scheduler's answers over mTLS, that its claim's admission and release
receipts are in the log a witness cosigned; the same proof fails after any one
byte of a receipt, of a proof hash or of the checkpoint changes; and a later
proof is consistent with the checkpoint the tenant kept."""

import json

import grpc
import pytest

from protos.pool.v1 import claims_pb2, proofs_pb2, proofs_pb2_grpc
from scheduler.ledger import keys, note, proof
from tests.e2e.conftest import cluster  # noqa: F401  (the fixture: a real scheduler over mTLS)


def witness_cosigns(s, tmp_path):
    """`poolctl ledger cosign` as the witness principal: checks consistency with
    its last cosigned checkpoint, cosigns, records it."""
    if not (tmp_path / "witness.key").exists():
        keys.write_pair(s.witness_key, tmp_path / "witness")
    return s.as_principal("witness").json(
        "ledger", "cosign", "--key", str(tmp_path / "witness.key"), "--name", "witness.test/w1",
        "--steward-key", str(s.dir / "steward.pub"), "--state", str(tmp_path / "witness.state"), "--submit")


def test_a_tenant_proves_its_claims_admission_and_release_offline(cluster, tmp_path):  # noqa: F811
    s = cluster()
    s.register("w1")
    alpha = s.as_principal("alpha")
    alpha.claims.Submit(claims_pb2.SubmitRequest(claim_id="a1", tenant="alpha", estimate_uj=5))
    alpha.claims.Release(claims_pb2.ReleaseRequest(claim_id="a1"))
    first = witness_cosigns(s, tmp_path)
    assert first["previous_size"] == 0 and first["submitted"]

    out = tmp_path / "proof.json"
    summary = alpha.json("ledger", "prove", "a1", "--out", str(out))
    assert summary["cosigned"] and summary["pending"] == 0 and summary["proven"] == 3
    assert summary["claims"] == ["alpha/a1"]   # its key, as its receipts hold it (docs/LEDGER.md)
    # offline: no scheduler address, no certificate, no ledger
    offline = ["ledger", "check-proof", str(out), "--key", str(s.dir / "steward.pub"),
               "--witness-key", s.witness_vkey, "-o", "json"]
    checked = json.loads(s.as_principal(None).poolctl(*offline).stdout)
    assert [r["kind"] for r in checked["receipts"]] == ["claim_submitted", "claim_admitted", "released"]
    assert checked["cosigned_by"] == ["witness.test/w1"] and checked["size"] == first["size"]
    assert {r["actor"] for r in checked["receipts"]} == {"alpha"}

    # another tenant's claim is out of its reach
    beta = s.as_principal("beta")
    beta.claims.Submit(claims_pb2.SubmitRequest(claim_id="b1", tenant="beta", estimate_uj=5))
    refused = alpha.poolctl("ledger", "prove", "b1", "--out", str(tmp_path / "b.json"), check=False)
    assert refused.returncode != 0 and "OUT_OF_SCOPE" in refused.stderr

    # later: more receipts, a new cosigned checkpoint consistent with the one the tenant kept
    kept = tmp_path / "kept.note"
    kept.write_text(json.loads(out.read_text())["checkpoint"])
    alpha.claims.Submit(claims_pb2.SubmitRequest(claim_id="a2", tenant="alpha", estimate_uj=5))
    second = witness_cosigns(s, tmp_path)
    assert second["previous_size"] == first["size"] and second["size"] > first["size"]
    later = tmp_path / "later.json"
    alpha.poolctl("ledger", "prove", "a1", "--out", str(later), "--since-size", str(first["size"]))
    s.as_principal(None).poolctl("ledger", "check-proof", str(later), "--key", str(s.dir / "steward.pub"),
                                 "--witness-key", s.witness_vkey, "--since", str(kept))

    # a subtree in a time range: every claim alpha holds, the receipts since a1's release
    released_ns = next(r["time_ns"] for r in checked["receipts"] if r["kind"] == "released")
    subtree = tmp_path / "subtree.json"
    made = alpha.json("ledger", "prove", "--tenant", "alpha", "--since-ns", str(released_ns), "--out", str(subtree))
    assert made["claims"] == ["alpha/a1", "alpha/a2"] and made["pending"] == 0
    whole = json.loads(s.as_principal(None).poolctl(
        "ledger", "check-proof", str(subtree), "--key", str(s.dir / "steward.pub"), "--witness-key",
        s.witness_vkey, "-o", "json").stdout)
    assert whole["claims"] == ["alpha/a1", "alpha/a2"]
    assert [r["kind"] for r in whole["receipts"]][:2] == ["released", "claim_submitted"]   # a1's last, a2's first
    assert all(r["time_ns"] >= released_ns for r in whole["receipts"])
    refused = alpha.poolctl("ledger", "prove", "--tenant", "beta", "--out", str(tmp_path / "b.json"), check=False)
    assert refused.returncode != 0 and "OUT_OF_SCOPE" in refused.stderr

    # a witness that is not trusted by the scheduler cannot record a checkpoint
    stranger = keys.generate()
    signed = note.read_note(proofs_pb2_grpc.ProofsStub(s.as_principal("witness").channel).GetCheckpoint(
        proofs_pb2.GetCheckpointRequest(), timeout=10).note)
    forged = signed.with_signature(note.cosign(signed.body, "witness.test/w1", stranger, 1))
    with pytest.raises(grpc.RpcError) as caught:
        proofs_pb2_grpc.ProofsStub(s.as_principal("witness").channel).AddCosignature(
            proofs_pb2.AddCosignatureRequest(note=forged.encoded()), timeout=10)
    assert caught.value.details().startswith("WITNESS_REJECTED: untrusted_key")

    every_byte_matters(json.loads(out.read_text()), keys.load_public_key(s.dir / "steward.pub"),
                       note.read_vkey(s.witness_vkey))


def every_byte_matters(doc, steward, vkey):
    """Flip each bit position's byte, one at a time, in every receipt, every
    path hash and the checkpoint: each changed proof fails its check."""
    proof.check(doc, steward, [vkey])   # the unchanged one holds
    changed = 0

    def refused(mutated):
        nonlocal changed
        changed += 1
        with pytest.raises(proof.ProofInvalid):
            proof.check(mutated, steward, [vkey])

    for i, item in enumerate(doc["receipts"]):
        raw = bytes.fromhex(item["receipt"])
        for at in range(len(raw)):
            flipped = bytearray(raw)
            flipped[at] ^= 0x01
            refused({**doc, "receipts": [*doc["receipts"][:i], {**item, "receipt": flipped.hex()},
                                         *doc["receipts"][i + 1:]]})
        for p, h in enumerate(item["path"]):
            for at in range(32):
                flipped = bytearray.fromhex(h)
                flipped[at] ^= 0x80
                path = [*item["path"][:p], flipped.hex(), *item["path"][p + 1:]]
                refused({**doc, "receipts": [*doc["receipts"][:i], {**item, "path": path}, *doc["receipts"][i + 1:]]})
    text = doc["checkpoint"].encode()
    for at in range(len(text)):
        flipped = bytearray(text)
        flipped[at] ^= 0x01
        refused({**doc, "checkpoint": flipped.decode("utf-8", errors="replace")})
    assert changed > 1000
