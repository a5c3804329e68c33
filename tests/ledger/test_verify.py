"""Tampering with a ledger is refused at the first broken entry, with its reason;
signatures and chain are reported separately."""

import cbor2
import pytest

from scheduler.ledger import cose, export, keys, receipts
from scheduler.ledger.verify import REASONS, verify


def check(stream, key=None):
    return verify(list(export.split(b"".join(stream))), key, workers=1)


def test_an_untouched_ledger_verifies(small, steward_key):
    report = check(small, steward_key.public)
    assert (report.valid, report.length, report.first_bad_index, report.reason) == (True, 6, None, None)
    assert report.signatures_ok and report.chain_ok
    assert report.head == receipts.digest(small[-1])
    assert report.ledger_id == receipts.digest(small[0])
    assert report.grade == "self-attested"


@pytest.mark.parametrize("mask", [0x01, 0x80])
def test_every_flipped_byte_is_caught_in_its_own_entry(small, steward_key, mask):
    blob = b"".join(small)
    owner = [i for i, raw in enumerate(small) for _ in raw]
    for pos in range(len(blob)):
        flipped = bytearray(blob)
        flipped[pos] ^= mask
        report = verify(export.split(bytes(flipped)), steward_key.public, workers=1)
        assert not report.valid and report.reason in REASONS, pos
        assert report.first_bad_index == owner[pos], (pos, report)
        assert report.length == owner[pos]


@pytest.mark.parametrize("index", range(1, 6))
def test_a_dropped_entry_breaks_the_chain_there(small, index):
    report = check(small[:index] + small[index + 1:])
    if index == 5:   # dropping the tail is a shorter, valid ledger: only a witness can tell
        assert report.valid and report.length == 5
        return
    assert (report.reason, report.first_bad_index) == ("chain", index)
    assert report.signatures_ok and not report.chain_ok


@pytest.mark.parametrize("index", range(0, 6))
def test_a_duplicated_entry_breaks_the_chain_after_it(small, index):
    report = check(small[:index + 1] + small[index:])
    assert (report.reason, report.first_bad_index) == ("chain", index + 1)
    assert report.signatures_ok and not report.chain_ok


@pytest.mark.parametrize("index", range(1, 5))
def test_swapped_entries_break_the_chain_at_the_first(small, index):
    swapped = list(small)
    swapped[index], swapped[index + 1] = swapped[index + 1], swapped[index]
    report = check(swapped)
    assert (report.reason, report.first_bad_index) == ("chain", index)


def test_dropping_the_genesis_is_a_profile_failure_at_zero(small):
    report = check(small[1:])
    assert (report.reason, report.first_bad_index, report.valid) == ("profile", 0, False)


def _signed_core(key, core: dict, canonical: bool = True) -> bytes:
    return cose.sign(key, cbor2.dumps(core, canonical=canonical))


def _core(small, index, **changes):
    core = {"seq": index, "body": {"claim": "x"}, "kind": "claim.released",
            "prev": receipts.digest(small[index - 1]), "profile": "pool/1", "time_ns": 5}
    core.update(changes)
    return core


def test_a_signed_non_canonical_core_is_refused(small, steward_key):
    core = dict(reversed(list(_core(small, 3).items())))
    forged = small[:3] + [_signed_core(steward_key, core, canonical=False)]
    report = check(forged, steward_key.public)
    assert (report.reason, report.first_bad_index, report.length) == ("non_canonical", 3, 3)
    assert report.signatures_ok


def test_a_receipt_by_another_key_is_a_signature_failure(small, steward_key):
    forged = small[:3] + [_signed_core(keys.generate(), _core(small, 3))]
    report = check(forged)
    assert (report.reason, report.first_bad_index) == ("signature", 3)
    assert report.chain_ok and not report.signatures_ok


def test_a_whole_ledger_by_another_steward_fails_with_key(build, small):
    other = build([("claim.submitted", {})], key=keys.generate())
    assert check(other).valid       # self-consistent under the key its genesis names
    report = verify(other, keys.generate().public, workers=1)
    assert (report.reason, report.first_bad_index) == ("signature", 0)


def test_a_wrong_seq_with_a_good_chain_is_a_sequence_failure(small, steward_key):
    forged = small[:3] + [_signed_core(steward_key, _core(small, 3, seq=7))]
    report = check(forged)
    assert (report.reason, report.first_bad_index) == ("sequence", 3)


@pytest.mark.parametrize("change", [{"profile": "pool/2"}, {"extra": 1}, {"prev": b"short"},
                                    {"seq": -1}, {"kind": ""}, {"body": [1]}])
def test_a_core_outside_the_profile_is_refused(small, steward_key, change):
    forged = small[:3] + [_signed_core(steward_key, _core(small, 3, **change))]
    report = check(forged)
    assert (report.reason, report.first_bad_index) == ("profile", 3)


def test_a_truncated_tail_is_reported_and_the_rest_is_intact(small, steward_key):
    blob = b"".join(small)
    report = verify(export.split(blob[:-10]), steward_key.public, workers=1)
    assert (report.valid, report.reason, report.first_bad_index) == (False, "decode", 5)
    assert report.length == 5 and report.head == receipts.digest(small[4])


def test_an_empty_stream_is_not_a_ledger():
    report = verify([], workers=1)
    assert (report.valid, report.reason, report.first_bad_index, report.length) == (False, "decode", 0, 0)


def test_parallel_signature_checks_find_the_same_fault(build, steward_key):
    many = build([("metered", {"i": i}) for i in range(9000)])
    forged = many[:8500] + [_signed_core(keys.generate(), _core(many, 8500))] + many[8501:]
    report = verify(forged, steward_key.public, workers=2)
    assert (report.reason, report.first_bad_index, report.chain_ok) == ("signature", 8500, False)
