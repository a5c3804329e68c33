"""`poolctl ledger verify --witness-key`: only trusted witnesses grade a ledger
`witnessed`, and a trusted statement that contradicts the ledger fails it —
a history cut below what was witnessed, or rewritten and re-signed with the
steward's own key."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.ledger import export, keys, receipts, witness
from scheduler.ledger.cose import parse_whole
from scheduler.ledger.steward import open_ledger

POOLCTL = Path(sys.executable).with_name("poolctl")


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    """A 6-receipt ledger, a statement over all of it by a trusted witness, and the steward key."""
    base = tmp_path_factory.mktemp("trust")
    steward_key, notary, stranger = keys.generate(), keys.generate(), keys.generate()
    keys.write_pair(notary, base / "notary")
    keys.write_pair(stranger, base / "stranger")
    steward = open_ledger(base / "l.db", steward_key)
    for n in range(5):
        steward.append("claim.submitted", {"n": n})
    raws = list(steward.read(0))
    statement = witness.sign_statement(notary, steward_key.public, receipts.digest(raws[0]), len(raws),
                                       receipts.digest(raws[-1]))
    steward.close()
    (base / "notary.cose").write_bytes(statement)
    return base, steward_key, raws


def _verify(base: Path, raws: list[bytes], *keys_: str):
    path = base / f"ledger-{len(raws)}-{receipts.digest(b''.join(raws)).hex()[:8]}.cbor"
    export.write(iter(raws), path)
    args = [str(POOLCTL), "ledger", "verify", str(path), "--witness", str(base / "notary.cose"), "-o", "json"]
    for k in keys_:
        args += ["--witness-key", str(base / k)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    return done.returncode, json.loads(done.stdout)


def test_a_trusted_statement_that_holds_grades_witnessed(signed):
    base, _, raws = signed
    code, doc = _verify(base, raws, "notary.pub")
    assert code == 0 and (doc["valid"], doc["grade"], doc["witnessed_length"]) == (True, "witnessed", 6)


def test_an_untrusted_witness_grades_self_attested(signed):
    base, _, raws = signed
    code, doc = _verify(base, raws, "stranger.pub")
    assert code == 0 and (doc["valid"], doc["grade"], doc["witnessed_length"]) == (True, "self-attested", 0)


def test_a_ledger_cut_below_the_witnessed_length_fails(signed):
    base, _, raws = signed
    code, doc = _verify(base, raws[:4], "notary.pub")
    assert code == 1 and (doc["valid"], doc["reason"], doc["first_bad_index"]) == (False, "history_cut", 4)


def test_a_rewritten_ledger_re_signed_by_the_steward_fails(signed):
    base, steward_key, raws = signed
    rewritten, prev = raws[:2], receipts.digest(raws[1])
    for seq in range(2, len(raws)):   # the steward's own key signs a different history after receipt 1
        entry, _ = receipts.read_core(parse_whole(raws[seq]).payload)
        made = receipts.make(steward_key, seq, prev, entry.time_ns, entry.kind, {"n": 100 + seq})
        rewritten.append(made.raw)
        prev = made.hash
    code, doc = _verify(base, rewritten, "notary.pub")
    assert code == 1 and (doc["valid"], doc["reason"], doc["first_bad_index"]) == (False, "history_rewritten", 5)
    code, doc = _verify(base, rewritten)   # without a trusted key the signatures and chain look fine
    assert code == 0 and doc["valid"]


def test_the_report_of_a_contradiction_describes_the_prefix_and_says_why(signed):
    """history_rewritten: length is the first bad index (and head that prefix's);
    the trusted statement shows its problem instead of witness: null."""
    base, steward_key, raws = signed
    rewritten, prev = raws[:2], receipts.digest(raws[1])
    for seq in range(2, len(raws)):
        entry, _ = receipts.read_core(parse_whole(raws[seq]).payload)
        made = receipts.make(steward_key, seq, prev, entry.time_ns, entry.kind, {"n": 200 + seq})
        rewritten.append(made.raw)
        prev = made.hash
    code, doc = _verify(base, rewritten, "notary.pub")
    assert code == 1 and (doc["length"], doc["head"]) == (5, receipts.digest(rewritten[4]).hex())
    assert doc["witness"]["problem"] == "head_mismatch" and doc["witness"]["length"] == 6
    code, doc = _verify(base, raws[:4], "notary.pub")
    assert (doc["length"], doc["witness"]["problem"]) == (4, "beyond_length")


def test_a_trusted_statement_of_length_0_is_beyond_length(signed, tmp_path):
    base, steward_key, raws = signed
    notary = keys.load_signing_key(base / "notary.key")
    zero = witness.sign_statement(notary, steward_key.public, receipts.digest(raws[0]), 0, bytes(32))
    path = tmp_path / "ledger.cbor"
    export.write(iter(raws), path)
    (tmp_path / "zero.cose").write_bytes(zero)
    done = subprocess.run([str(POOLCTL), "ledger", "verify", str(path), "--witness", str(tmp_path / "zero.cose"),
                           "--witness-key", str(base / "notary.pub"), "-o", "json"], capture_output=True, text=True)
    doc = json.loads(done.stdout)
    assert done.returncode == 0 and doc["grade"] == "self-attested"
    assert doc["witness"]["problem"] == "beyond_length" and "not checked" in doc["tail"]


def test_an_invalid_ledger_is_witnessed_for_the_prefix_a_trusted_statement_holds_for(signed, tmp_path):
    base, steward_key, raws = signed
    notary = keys.load_signing_key(base / "notary.key")
    early = witness.sign_statement(notary, steward_key.public, receipts.digest(raws[0]), 4,
                                   receipts.digest(raws[3]))
    bad = receipts.make(steward_key, 6, receipts.digest(raws[5]), 1, "genesis", {"steward_key": bytes(32)})
    path = tmp_path / "ledger.cbor"
    export.write(iter([*raws, bad.raw]), path)
    (tmp_path / "early.cose").write_bytes(early)
    done = subprocess.run([str(POOLCTL), "ledger", "verify", str(path), "--witness", str(tmp_path / "early.cose"),
                           "--witness-key", str(base / "notary.pub"), "-o", "json"], capture_output=True, text=True)
    doc = json.loads(done.stdout)
    assert done.returncode == 1 and (doc["reason"], doc["first_bad_index"]) == ("body", 6)
    assert (doc["grade"], doc["witnessed_length"]) == ("witnessed", 4) and doc["witness"]["problem"] is None


def test_verify_without_a_witness_key_says_a_cut_tail_is_not_checked(signed, tmp_path):
    base, _, raws = signed
    path = tmp_path / "ledger.cbor"
    export.write(iter(raws[:3]), path)
    done = subprocess.run([str(POOLCTL), "ledger", "verify", str(path), "-o", "json"], capture_output=True, text=True)
    doc = json.loads(done.stdout)
    assert done.returncode == 0 and doc["valid"] and doc["tail"].startswith("not checked: without --witness-key")
