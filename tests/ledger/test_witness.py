"""Witnesses: a second key signs (ledger id, length, head); a rewritten history
no longer matches it; the steward cannot witness itself."""

import pytest

from scheduler.ledger import keys, receipts, witness
from scheduler.ledger.steward import open_ledger
from scheduler.ledger.verify import verify

WITNESS_KEY = keys.generate()


def _statement(steward_key, raws, length=None, key=WITNESS_KEY):
    length = len(raws) if length is None else length
    return witness.sign_statement(key, steward_key.public, receipts.digest(raws[0]), length,
                                  receipts.digest(raws[length - 1]))


def test_a_recorded_witness_grades_the_ledger_up_to_its_length(tmp_path, steward_key):
    steward = open_ledger(tmp_path / "l.db", steward_key)
    for i in range(4):
        steward.append("claim.submitted", {"claim": f"c{i}"})
    steward.record_witness(_statement(steward_key, list(steward.read())))
    steward.append("claim.released", {"claim": "c0"})
    assert steward.info().witnessed_length == 5
    report = verify(steward.read(), workers=1)
    assert report.valid and report.grade == "witnessed" and report.witnessed_length == 5
    assert report.witness.key_id == WITNESS_KEY.public.key_id
    steward.close()


def test_a_rewritten_history_no_longer_matches_its_witness(build, steward_key):
    history = [("claim.submitted", {"claim": f"c{i}"}) for i in range(4)]
    original = build(history)
    statement = _statement(steward_key, original)
    honest = build(history + [("witness", {"statement": statement})])
    assert verify(honest, workers=1).grade == "witnessed"
    history[1] = ("claim.submitted", {"claim": "rewritten"})
    rewritten = build(history + [("witness", {"statement": statement})])
    report = verify(rewritten, workers=1)
    assert report.valid and report.grade == "self-attested" and report.witnessed_length == 0
    assert report.witness.problem == "head_mismatch"


def test_a_witness_file_is_checked_against_the_ledger(small, steward_key):
    statement = _statement(steward_key, small, length=4)
    report = verify(small, witness_files=[statement], workers=1)
    assert (report.grade, report.witnessed_length) == ("witnessed", 4)
    # truncation below the witnessed length is what a witness exposes
    report = verify(small[:3], witness_files=[statement], workers=1)
    assert report.grade == "self-attested" and report.witness.problem == "beyond_length"


def test_the_steward_cannot_witness_itself(small, steward_key):
    with pytest.raises(witness.WitnessRejected) as err:
        _statement(steward_key, small, key=steward_key)
    assert err.value.code == "steward_key"


@pytest.mark.parametrize("mangle, code", [
    (lambda s: s[:-1] + bytes([s[-1] ^ 1]), "signature"),
    (lambda s: s[:10], "malformed"),
])
def test_record_witness_refuses_a_bad_statement(tmp_path, steward_key, mangle, code):
    steward = open_ledger(tmp_path / "l.db", steward_key)
    good = _statement(steward_key, list(steward.read()))
    with pytest.raises(witness.WitnessRejected) as err:
        steward.record_witness(mangle(good))
    assert err.value.code == code
    other = open_ledger(tmp_path / "other.db", keys.generate())
    with pytest.raises(witness.WitnessRejected) as err:
        other.record_witness(good)
    assert err.value.code == "other_ledger"
    assert steward.length == 1
    steward.close()
    other.close()


def test_a_statement_sent_again_makes_no_second_receipt_even_after_a_restart(tmp_path, steward_key):
    """One receipt per statement (a witness's key and the length it states):
    a witness whose answer was lost sends the same statement again, to this
    steward or to the next one that replays the ledger."""
    steward = open_ledger(tmp_path / "l.db", steward_key)
    for i in range(3):
        steward.append("claim.submitted", {"claim": f"c{i}"})
    statement = _statement(steward_key, list(steward.read()))
    assert steward.record_witness(statement) is not None
    assert steward.record_witness(statement) is None and steward.length == 5
    later = _statement(steward_key, list(steward.read()))   # about 5 receipts: a new statement
    assert steward.record_witness(later) is not None and steward.length == 6
    steward.close()
    again = open_ledger(tmp_path / "l.db", steward_key)
    assert again.record_witness(statement) is None and again.record_witness(later) is None
    other = _statement(steward_key, list(again.read())[:4], key=keys.generate())   # another witness, length 4
    assert again.record_witness(other) is not None and again.length == 7
    again.close()
