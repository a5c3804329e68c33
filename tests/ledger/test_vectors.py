"""The test vectors in docs/LEDGER.md are what the code produces and verifies."""

import re
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from scheduler.ledger import keys, receipts
from scheduler.ledger.verify import verify

DOC = Path(__file__).parents[2] / "docs" / "LEDGER.md"


def _documented_receipts() -> list[bytes]:
    vectors = DOC.read_text().split("## Test vectors", 1)[1]
    blocks = re.findall(r"```\n([0-9a-f\n]+)```", vectors)
    return [bytes.fromhex(block.replace("\n", "")) for block in blocks]


def test_documented_receipts_are_reproduced_and_verify():
    key = keys.SigningKey.of(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))
    genesis = receipts.make(key, 0, receipts.ZERO_HASH, 1_700_000_000_000_000_000, "genesis",
                            {"steward_key": key.public.raw})
    admitted = receipts.make(key, 1, genesis.hash, 1_700_000_000_000_000_001, "claim.admitted",
                             {"claim": "c-1", "hold_uj": 5_000_000})
    released = receipts.make(key, 2, admitted.hash, 1_700_000_000_000_000_002, "claim.released",
                             {"claim": "c-1"}, actor="alpha")
    assert _documented_receipts() == [genesis.raw, admitted.raw, released.raw]
    assert key.public.key_id.hex() in DOC.read_text()
    assert all(r.hash.hex() in DOC.read_text() for r in (genesis, admitted, released))
    seen = []
    assert verify([genesis.raw, admitted.raw, released.raw], key.public, workers=1, on_entry=seen.append).valid
    assert [e.actor for e in seen] == [None, None, "alpha"]   # receipts without an actor verify as before
