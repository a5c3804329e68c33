"""A third-party check of our inclusion proofs: sigstore's RFC 6962 verifier
(`sigstore._internal.merkle.verify_merkle_inclusion`, the one sigstore-python
uses on Rekor's log entries) accepts each receipt's proof against a
checkpoint's root, and refuses a changed one.

sigstore is not one of Pool's dependencies (it pulls in 30-odd packages:
pydantic, tuf, …), so this test runs only where it is installed; it is skipped
otherwise (docs/LEDGER.md §11 says how it was run)."""

from types import SimpleNamespace

import pytest

from scheduler.ledger import keys, merkle
from scheduler.ledger.steward import open_ledger

sigstore_merkle = pytest.importorskip("sigstore._internal.merkle")
errors = pytest.importorskip("sigstore.errors")


def entry(raw: bytes, index: int, size: int, path: list[bytes], root: bytes) -> SimpleNamespace:
    """What verify_merkle_inclusion reads of a Rekor TransparencyLogEntry."""
    proof = SimpleNamespace(log_index=index, tree_size=size, hashes=path, root_hash=root)
    return SimpleNamespace(_inner=SimpleNamespace(inclusion_proof=proof, canonicalized_body=raw))


def test_sigstore_verifies_our_inclusion_proofs(tmp_path):
    steward = open_ledger(tmp_path / "l.db", keys.generate())
    for i in range(40):
        steward.append("claim_admitted", {"claim_id": f"c{i}"})
    size = steward.length
    root, proofs = steward.root(size), steward.proofs
    for index in (0, 1, 15, 16, 17, 31, 39, size - 1):
        raw = next(steward.read(index, index + 1))
        path = proofs.inclusion(index, size)
        sigstore_merkle.verify_merkle_inclusion(entry(raw, index, size, path, root))
        with pytest.raises(errors.VerificationError):
            sigstore_merkle.verify_merkle_inclusion(entry(raw + b"x", index, size, path, root))
        assert merkle.verify_inclusion(index, size, merkle.leaf_hash(raw), path, root)
    steward.close()
