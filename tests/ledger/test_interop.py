"""Every receipt of an export verifies with pycose, an outside COSE library,
given only the steward's raw public key."""

import cbor2
from pycose.headers import KID, Algorithm
from pycose.keys import OKPKey
from pycose.keys.curves import Ed25519
from pycose.messages import Sign1Message

from scheduler.ledger import export, keys
from scheduler.ledger.steward import open_ledger


def test_pycose_verifies_every_exported_receipt(tmp_path, steward_key):
    steward = open_ledger(tmp_path / "l.db", steward_key)
    for n in range(5):
        steward.append("claim.admitted", {"claim": f"c{n}", "hold_uj": 10**9 + n, "tenant": "a/b"})
    steward.close()
    export.write(export.receipts_at(tmp_path / "l.db"), tmp_path / "l.cbor")
    public = keys.load_public_key(_raw_key_file(tmp_path, steward_key))

    blob = (tmp_path / "l.cbor").read_bytes()
    received = list(export.split(blob))
    assert b"".join(received) == blob and len(received) == 6
    for seq, raw in enumerate(received):
        message = Sign1Message.decode(raw)
        message.key = OKPKey(crv=Ed25519, x=public.raw)
        assert message.verify_signature(), seq
        assert message.phdr[Algorithm].fullname == "EDDSA"
        assert message.phdr[KID] == public.key_id and message.uhdr == {}
        assert cbor2.loads(message.payload)["seq"] == seq


def test_pycose_refuses_a_tampered_receipt(small, steward_key):
    message = Sign1Message.decode(small[1][:-1] + bytes([small[1][-1] ^ 1]))
    message.key = OKPKey(crv=Ed25519, x=steward_key.public.raw)
    assert not message.verify_signature()


def _raw_key_file(tmp_path, key):
    path = tmp_path / "steward.raw"
    path.write_bytes(key.public.raw)
    return path
