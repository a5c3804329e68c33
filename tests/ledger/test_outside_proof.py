"""An outside check: a proof verifier written from docs/LEDGER.md §3, §4, §7
and §11 alone — it imports nothing of scheduler/ (only cbor2 for the core and
cryptography for Ed25519) — agrees with `poolctl ledger check-proof` on a real
scheduler's proof, and refuses the changed copies check-proof refuses."""

import base64
import hashlib
import json
import struct

import cbor2
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from protos.pool.v1 import claims_pb2
from tests.e2e.conftest import cluster  # noqa: F401
from tests.ledger.test_proofs_e2e import witness_cosigns

DASH = "\u2014 "


class Bad(Exception):
    pass


def sha(*parts: bytes) -> bytes:
    return hashlib.sha256(b"".join(parts)).digest()


def ed25519_ok(key: bytes, signature: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(key).verify(signature, message)
        return True
    except InvalidSignature:
        return False


def b64(text: str) -> bytes:
    raw = base64.b64decode(text, validate=True)
    if base64.b64encode(raw).decode() != text:
        raise Bad("non-canonical base64")
    return raw


def open_note(text: str):
    """§11: body, blank line, signature lines '— name base64(keyid ‖ sig)'."""
    body, _, sigs = text.rpartition("\n\n")
    body += "\n"
    lines = sigs.split("\n")
    if lines[-1] != "" or any(not line.startswith(DASH) for line in lines[:-1]):
        raise Bad("signature lines")
    out = []
    for line in lines[:-1]:
        name, blob = line[len(DASH):].split(" ")
        raw = b64(blob)
        out.append((name, raw[:4], raw[4:]))
    origin, size, root, empty = body.split("\n")
    if empty != "" or not size.isdigit():
        raise Bad("checkpoint body")
    return body, out, origin, int(size), b64(root)


def inclusion_ok(index: int, size: int, leaf: bytes, path: list, root: bytes) -> bool:
    """RFC 9162 §2.1.3.2, transcribed."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            r = sha(b"\x01", p, r)
            while fn % 2 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = sha(b"\x01", r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_proof(doc: dict, steward: bytes, witness_name: str, witness_key: bytes) -> list:
    body, sigs, origin, size, root = open_note(doc["checkpoint"])
    steward_id = sha(origin.encode(), b"\n\x01", steward)[:4]
    if not any(n == origin and k == steward_id and ed25519_ok(steward, s, body.encode()) for n, k, s in sigs):
        raise Bad("steward signature")
    witness_id = sha(witness_name.encode(), b"\n\x04", witness_key)[:4]
    cosigned = False
    for name, kid, blob in sigs:
        if name == witness_name and kid == witness_id and len(blob) == 72:
            (t,) = struct.unpack(">Q", blob[:8])
            cosigned |= ed25519_ok(witness_key, blob[8:], f"cosignature/v1\ntime {t}\n".encode() + body.encode())
    if not cosigned:
        raise Bad("no cosignature")
    kinds = []
    for item in doc["receipts"]:
        raw = bytes.fromhex(item["receipt"])
        # §3: D2 84 55 <protected 21: A2 01 27 04 50 kid16> A0 <payload bstr> 58 40 <sig 64>
        if raw[:3] != b"\xd2\x84\x55" or raw[3:8] != b"\xa2\x01\x27\x04\x50" or raw[24] != 0xA0:
            raise Bad("layout")
        if raw[8:24] != sha(steward)[:16]:
            raise Bad("key id")
        envelope = cbor2.loads(raw)
        protected, _, payload, signature = envelope.value
        to_be_signed = cbor2.dumps(["Signature1", protected, b"", payload])
        if not ed25519_ok(steward, signature, to_be_signed):
            raise Bad("receipt signature")
        core = cbor2.loads(payload)
        if core["seq"] != item["seq"] or core["profile"] != "pool/1":
            raise Bad("core")
        body_ = core["body"]
        named = body_.get("claim_id") or (body_.get("spec") or {}).get("claim_id")
        if named != doc["claim_id"]:
            raise Bad("claim")
        path = [bytes.fromhex(h) for h in item["path"]]
        if not inclusion_ok(item["seq"], size, sha(b"\x00", raw), path, root):
            raise Bad("inclusion")
        kinds.append(core["kind"])
    return kinds


def test_an_independent_verifier_agrees_with_check_proof(cluster, tmp_path):  # noqa: F811
    s = cluster()
    s.register("w1")
    alpha = s.as_principal("alpha")
    alpha.claims.Submit(claims_pb2.SubmitRequest(claim_id="a1", tenant="alpha", estimate_uj=5))
    alpha.claims.Release(claims_pb2.ReleaseRequest(claim_id="a1"))
    for i in range(5):   # a tree that is not a power of two
        alpha.claims.Submit(claims_pb2.SubmitRequest(claim_id=f"x{i}", tenant="alpha", estimate_uj=5))
    witness_cosigns(s, tmp_path)
    out = tmp_path / "proof.json"
    alpha.poolctl("ledger", "prove", "a1", "--out", str(out))
    doc = json.loads(out.read_text())
    steward = load_pem_public_key((s.dir / "steward.pub").read_bytes()).public_bytes_raw()
    name, _, typed = s.witness_vkey.split("+", 2)
    witness_key = base64.b64decode(typed)[1:]
    assert verify_proof(doc, steward, name, witness_key) == ["claim_submitted", "claim_admitted", "released"]

    def both_refuse(changed: dict) -> None:
        with pytest.raises((Bad, ValueError, KeyError, cbor2.CBORDecodeError)):
            verify_proof(changed, steward, name, witness_key)
        path = tmp_path / "changed.json"
        path.write_text(json.dumps(changed))
        done = s.as_principal(None).poolctl("ledger", "check-proof", str(path), "--key", str(s.dir / "steward.pub"),
                                            "--witness-key", s.witness_vkey, check=False)
        assert done.returncode == 1 and "PROOF_INVALID" in done.stderr

    receipt = doc["receipts"][1]
    both_refuse({**doc, "receipts": [doc["receipts"][0], {**receipt, "seq": receipt["seq"] + 1}]})
    both_refuse({**doc, "receipts": [{**receipt, "path": receipt["path"][::-1]}]})
    both_refuse({**doc, "checkpoint": doc["checkpoint"].replace("\n", "\n\n", 1)})
    swapped = bytearray.fromhex(receipt["receipt"])
    swapped[-1] ^= 1
    both_refuse({**doc, "receipts": [{**receipt, "receipt": swapped.hex()}]})
