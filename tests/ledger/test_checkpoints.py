"""C2SP checkpoints of the ledger: the steward signs one of any prefix, takes
back one that a trusted witness cosigned (and refuses every other), records it
as a `cosigned_checkpoint` receipt, finds it again after a reopen, and verify
refuses a recorded checkpoint whose root or signature is not the ledger's."""

import time

import pytest

from scheduler.ledger import keys, merkle, note, receipts
from scheduler.ledger.sqlite import SqliteStore
from scheduler.ledger.steward import Steward, open_ledger
from scheduler.ledger.verify import verify
from scheduler.ledger.witness import WitnessRejected

WITNESS = keys.generate()
VKEY = note.VKey("witness.example/w1", note.COSIGNATURE_V1, WITNESS.public)


def cosigned(steward, size=None, key=WITNESS, name=VKEY.name):
    signed = steward.signed_checkpoint(size)
    return signed.with_signature(note.cosign(signed.body, name, key, int(time.time()))).encoded()


def test_a_cosigned_checkpoint_is_recorded_and_found_again(tmp_path, steward_key):
    steward = open_ledger(tmp_path / "l.db", steward_key)
    for i in range(6):
        steward.append("claim_admitted", {"claim_id": f"c{i}"})
    signed = steward.signed_checkpoint()
    checkpoint = note.read_checkpoint(signed.body)
    assert checkpoint.size == 7 and checkpoint.origin == note.origin_for(steward.ledger_id)
    assert checkpoint.root == merkle.root_of([merkle.leaf_hash(r) for r in steward.read()])
    assert note.signed_by(signed, steward.origin, steward_key.public)
    raw = cosigned(steward, 5)
    receipt = steward.commit([steward.prepare_cosigned(raw, [VKEY], actor="w1")])[0]
    assert receipt.entry.kind == receipts.COSIGNED and steward.cosigned.encoded() == raw
    steward.close()
    again = open_ledger(tmp_path / "l.db", steward_key)
    assert again.cosigned.encoded() == raw
    assert verify(again.read()).valid
    again.close()


@pytest.mark.parametrize("case", ["untrusted", "not_cosigned", "other_root", "too_long", "not_steward",
                                  "other_origin", "garbage"])
def test_a_checkpoint_that_is_not_this_ledgers_or_not_cosigned_is_refused(tmp_path, steward_key, case):
    steward = open_ledger(tmp_path / "l.db", steward_key)
    steward.append("claim_admitted", {"claim_id": "c"})
    other = keys.generate()
    body = steward.signed_checkpoint().body
    raw = {
        "untrusted": lambda: cosigned(steward, key=other),
        "not_cosigned": lambda: steward.signed_checkpoint().encoded(),
        "other_root": lambda: note.sign(note.Checkpoint(steward.origin, 2, bytes(32)).body(), steward.origin,
                                        steward_key).with_signature(note.cosign(
                                            note.Checkpoint(steward.origin, 2, bytes(32)).body(), VKEY.name,
                                            WITNESS, 1)).encoded(),
        "too_long": lambda: note.sign(note.Checkpoint(steward.origin, 3, bytes(32)).body(), steward.origin,
                                      steward_key).with_signature(note.cosign(
                                          note.Checkpoint(steward.origin, 3, bytes(32)).body(), VKEY.name,
                                          WITNESS, 1)).encoded(),
        "not_steward": lambda: note.sign(body, steward.origin, other).with_signature(
            note.cosign(body, VKEY.name, WITNESS, 1)).encoded(),
        "other_origin": lambda: note.sign(body.replace("pool.invalid", "pool.example"), "x", steward_key).encoded(),
        "garbage": lambda: b"not a note",
    }[case]()
    code = {"untrusted": "untrusted_key", "not_cosigned": "untrusted_key", "other_root": "head_mismatch",
            "too_long": "beyond_length", "not_steward": "signature", "other_origin": "other_ledger",
            "garbage": "malformed"}[case]
    with pytest.raises(WitnessRejected) as refused:
        steward.prepare_cosigned(raw, [VKEY])
    assert refused.value.code == code
    length = steward.length
    steward.close()
    assert SqliteStore(tmp_path / "l.db").length() == length   # nothing refused leaves a receipt


@pytest.mark.parametrize("case", ["root", "steward_signature", "origin", "size"])
def test_verify_refuses_a_recorded_checkpoint_that_is_not_the_ledgers(build, steward_key, case):
    """A steward-signed cosigned_checkpoint receipt whose note says something
    else than the ledger: refused at its index with reason body."""
    base = build([("claim_admitted", {"claim_id": f"c{i}"}) for i in range(4)])
    ledger_id = receipts.digest(base[0])
    origin = note.origin_for(ledger_id)
    root = merkle.root_of([merkle.leaf_hash(r) for r in base[:3]])
    size, signer, name = 3, steward_key, origin
    if case == "root":
        root = bytes(32)
    elif case == "steward_signature":
        signer = keys.generate()
    elif case == "origin":
        origin = name = "pool.invalid/ledger/other"
    elif case == "size":
        size = 9
    body = note.Checkpoint(origin, size, root).body()
    raw = note.sign(body, name, signer).with_signature(note.cosign(body, "w", WITNESS, 1)).encoded()
    forged = build([("claim_admitted", {"claim_id": f"c{i}"}) for i in range(4)]
                   + [(receipts.COSIGNED, {"note": raw})])
    # build() re-signs from scratch: same key and times, so the prefix is the same ledger
    assert forged[:5] == base
    report = verify(forged)
    assert (report.valid, report.first_bad_index, report.reason) == (False, 5, "body")
    good = note.Checkpoint(note.origin_for(ledger_id), 3, merkle.root_of([merkle.leaf_hash(r) for r in base[:3]]))
    fine = note.sign(good.body(), note.origin_for(ledger_id), steward_key).encoded()
    assert verify(build([("claim_admitted", {"claim_id": f"c{i}"}) for i in range(4)]
                        + [(receipts.COSIGNED, {"note": fine})])).valid


def test_a_trusted_cosigned_checkpoint_grades_the_ledger_and_catches_a_cut_or_rewrite(tmp_path, steward_key):
    from scheduler.ledger import trust
    steward = open_ledger(tmp_path / "l.db", steward_key)
    for i in range(6):
        steward.append("claim_admitted", {"claim_id": f"c{i}"})
    raw = cosigned(steward, 5)
    steward.commit([steward.prepare_cosigned(raw, [VKEY])])
    outside = cosigned(steward)   # of all 8, kept by the witness outside the ledger
    raws = list(steward.read())
    steward.close()
    judged = trust.judge(raws, steward_key.public, [], {VKEY})
    assert judged.valid and judged.witnessed_length == 5 and judged.document()["grade"] == "witnessed"
    judged = trust.judge(raws, steward_key.public, [outside], {VKEY})
    assert judged.valid and judged.witnessed_length == 8
    cut = trust.judge(raws[:6], steward_key.public, [outside], {VKEY})
    assert not cut.valid and cut.document()["reason"] == "history_cut" and cut.document()["length"] == 6
    forged, prev = raws[:3], receipts.digest(raws[2])
    for seq in range(3, 8):
        made = receipts.make(steward_key, seq, prev, seq, "claim_admitted", {"claim_id": "forged"})
        forged.append(made.raw)
        prev = made.hash
    rewritten = trust.judge(forged, steward_key.public, [outside], {VKEY})
    doc = rewritten.document()
    assert (doc["valid"], doc["reason"], doc["first_bad_index"], doc["witness"]["problem"]) == \
        (False, "history_rewritten", 7, "head_mismatch")
    assert trust.judge(forged, steward_key.public, [outside], {keys.generate().public}).valid   # untrusted: no say
