"""verify checks what receipts mean as well as their bytes (issue 12, item 6):
steward-signed receipts of the ledger's own kinds with the wrong shape are
refused at their index with reason `body`; and the cases docs/LEDGER.md §6
spells out (long-form lengths, no key, the two flags) are what verify does."""

import pytest

from scheduler.ledger import cose, dcbor, export, keys, receipts, witness
from scheduler.ledger.steward import prepare
from scheduler.ledger.verify import verify


def check(stream, key=None, **kwargs):
    return verify(list(export.split(b"".join(stream))), key, workers=1, **kwargs)


def statement(key, ledger_raws, steward_key):
    return witness.sign_statement(key, steward_key.public, receipts.digest(ledger_raws[0]), len(ledger_raws),
                                  receipts.digest(ledger_raws[-1]))


def filler(n):
    return [("claim.submitted", {"n": i}) for i in range(n)]


@pytest.mark.parametrize("kind, body, at", [
    ("witness", {}, 3),
    ("witness", {"statement": "text"}, 3),
    ("witness", {"statement": b"not a COSE_Sign1"}, 3),
    ("checkpoint", {"bogus": 1}, 3),
    ("checkpoint", {"state": {}, "witnessed_length": 9, "witness_key_id": None}, 3),   # beyond itself
    ("checkpoint", {"state": {}, "witnessed_length": 0, "witness_key_id": b"x" * 16}, 3),
    ("genesis", {"steward_key": b"k" * 32}, 20),
    ("loss_accepted", {}, 3),
    ("loss_accepted", {"recorded_length": 9, "recorded_head": b"h" * 32, "length": 7}, 3),   # beyond itself
])
def test_a_steward_signed_receipt_of_the_wrong_shape_is_refused_there(build, steward_key, kind, body, at):
    stream = build(filler(at - 1) + [(kind, body)] + filler(2))
    report = check(stream, steward_key.public)
    assert (report.valid, report.reason, report.first_bad_index, report.length) == (False, "body", at, at)
    assert report.signatures_ok and report.chain_ok   # the steward's, in its place, and wrong
    assert report.detail.startswith(f"{kind}: ")
    assert not check(stream).valid   # the same without a key


def test_a_second_genesis_at_seq_20_is_named(build, steward_key):
    stream = build(filler(19) + [("genesis", {"steward_key": steward_key.public.raw})])
    report = check(stream)
    assert (report.reason, report.first_bad_index) == ("body", 20)
    assert "only receipt 0 is a genesis" in report.detail


def test_well_formed_ledger_kinds_verify(build, steward_key):
    witness_key = keys.generate()
    first = build(filler(2))
    good = statement(witness_key, first, steward_key)
    stream = build(filler(2) + [
        ("witness", {"statement": good}),
        ("checkpoint", {"state": {"any": [1, 2]}, "witnessed_length": 3, "witness_key_id": witness_key.public.key_id}),
        ("checkpoint", {"state": None, "witnessed_length": 0, "witness_key_id": None}),
        ("loss_accepted", {"recorded_length": 90, "recorded_head": b"h" * 32, "length": 6}),
    ])
    report = check(stream, steward_key.public)
    assert report.valid and report.witnessed_length == 3, report


def test_a_witness_that_reads_but_does_not_hold_only_lowers_the_grade(build, steward_key):
    """Well-formed is not the same as holding: a statement about another ledger is shown, not refused."""
    elsewhere = statement(keys.generate(), build(filler(1), key=keys.generate()), steward_key)
    report = check(build(filler(2) + [("witness", {"statement": elsewhere})]), steward_key.public)
    assert report.valid and report.grade == "self-attested" and report.witness.problem == "other_ledger"


def test_the_scheduler_kinds_are_checked_when_the_caller_says_how(build, steward_key):
    stream = build(filler(2) + [("claim.submitted", {"bogus": 1})])
    wrong = _bogus_is_wrong
    report = check(stream, steward_key.public, bodies=wrong)
    assert (report.reason, report.first_bad_index, report.detail) == ("body", 3, "claim.submitted: bogus")
    assert check(stream, steward_key.public).valid   # open kinds: the ledger alone cannot judge them


def _bogus_is_wrong(kind, body):
    return "bogus" if "bogus" in body else None


def test_parallel_verification_checks_bodies_too(build, steward_key):
    stream = build(filler(4500) + [("checkpoint", {"bogus": 1})] + filler(10))
    report = verify(stream, steward_key.public, workers=2, bodies=_bogus_is_wrong)
    assert (report.reason, report.first_bad_index) == ("body", 4501)


def _long_form(raw: bytes, which: str) -> bytes:
    """The same receipt with one byte string's length head in a longer form."""
    message = cose.parse_whole(raw)
    heads = {"protected": message.protected, "payload": message.payload, "signature": message.signature}
    parts = []
    for name, content in heads.items():
        head = cose.bstr_head(len(content))
        if name == which:
            head = b"\x59" + len(content).to_bytes(2, "big")   # 2-byte length where 1 byte (or none) would do
        parts.append(head + content)
    return raw[:2] + parts[0] + b"\xa0" + parts[1] + parts[2]


@pytest.mark.parametrize("which", ["protected", "payload", "signature"])
def test_a_long_form_length_is_non_canonical_for_every_head(small, steward_key, which):
    forged = small[:3] + [_long_form(small[3], which)]
    assert cose.parse_whole(_long_form(small[3], "none")) == cose.parse_whole(small[3])
    report = verify(forged, steward_key.public, workers=1)
    assert (report.reason, report.first_bad_index) == ("non_canonical", 3)
    assert not report.signatures_ok and not report.chain_ok   # an envelope that does not parse: neither


def test_without_a_key_a_genesis_naming_none_is_profile_and_nothing_is_signed(build, steward_key):
    stream = build(filler(2))
    core = receipts.read_core(cose.parse_whole(stream[0]).payload)[0]
    bad_genesis = receipts.make(steward_key, 0, receipts.ZERO_HASH, core.time_ns, "genesis", {"steward_key": b"?"})
    report = verify([bad_genesis.raw] + stream[1:], workers=1)
    assert (report.reason, report.first_bad_index) == ("profile", 0)
    assert not report.signatures_ok   # no key to check any signature against
    with_key = verify([bad_genesis.raw] + stream[1:], steward_key.public, workers=1)
    assert (with_key.reason, with_key.first_bad_index) == ("profile", 0) and with_key.signatures_ok


def test_a_core_that_cannot_be_read_fails_the_chain_not_the_signatures(small, steward_key):
    forged = small[:3] + [cose.sign(steward_key, b"\xa1\x61x\x01")]   # a det-CBOR map, not a pool/1 core
    report = verify(forged, steward_key.public, workers=1)
    assert (report.reason, report.first_bad_index) == ("profile", 3)
    assert report.signatures_ok and not report.chain_ok


def test_depth_32_counts_the_core_so_every_body_that_is_accepted_verifies(build, steward_key):
    def nested(levels):
        value = 1
        for _ in range(levels):
            value = {"a": value}
        return value
    deepest = prepare("x", nested(dcbor.MAX_DEPTH - 1)).body   # the core is the 32nd map
    assert check(build([("x", deepest)]), steward_key.public).valid
    with pytest.raises(dcbor.DcborError, match="nested deeper than 32"):
        prepare("x", nested(dcbor.MAX_DEPTH))


def test_8_mib_counts_the_core_payload_not_the_envelope(steward_key):
    def core_of(size):
        body = prepare("x", {"blob": bytes(size)}).body
        return receipts.make(steward_key, 1, bytes(32), 1, "x", body)
    overhead = len(cose.parse_whole(core_of(0).raw).payload) + 4   # a 4-byte length head for the large blob
    largest = core_of(dcbor.MAX_BYTES - overhead)
    assert len(cose.parse_whole(largest.raw).payload) == dcbor.MAX_BYTES < len(largest.raw)
    assert receipts.read_core(cose.parse_whole(largest.raw).payload)[0].kind == "x"
    with pytest.raises(dcbor.DcborError, match="over"):
        core_of(dcbor.MAX_BYTES - overhead + 1)


def test_a_file_that_is_neither_export_nor_store(tmp_path):
    """Not SQLite: read as an export, invalid at receipt 0 (exit 1). SQLite but
    not a Pool store: cannot be judged (exit 2). docs/LEDGER.md §6."""
    import sqlite3
    import subprocess
    import sys
    from pathlib import Path
    poolctl = Path(sys.executable).with_name("poolctl")
    (tmp_path / "notes.txt").write_text("not a ledger\n")
    done = subprocess.run([str(poolctl), "ledger", "verify", str(tmp_path / "notes.txt"), "-o", "json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and '"reason": "decode"' in done.stdout and '"first_bad_index": 0' in done.stdout
    conn = sqlite3.connect(tmp_path / "other.db")
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    done = subprocess.run([str(poolctl), "ledger", "verify", str(tmp_path / "other.db")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("poolctl: UNREADABLE: ") and done.stderr.count("\n") == 1


def _chunked(digest=None, chunks=None, indexes=(0, 1)):
    """Two chunks and their checkpoint, as the steward writes them (or forged)."""
    import hashlib
    data = [b"a" * 10, b"b" * 5]
    body = {"chunks": len(data) if chunks is None else chunks, "size": 15,
            "digest": digest or hashlib.sha256(b"".join(data)).digest(), "witnessed_length": 0,
            "witness_key_id": None}
    return [("checkpoint_chunk", {"index": i, "data": d}) for i, d in zip(indexes, data)] + [("checkpoint", body)]


def test_a_chunked_checkpoint_written_by_the_steward_verifies(memory_store, steward_key):
    from scheduler.ledger.steward import Steward
    steward = Steward.open(memory_store, steward_key)
    steward.append("m", {})
    from scheduler.ledger.steward import CHUNK_BYTES
    steward.checkpoint({"big": bytes(CHUNK_BYTES + 100)})   # two chunks
    steward.append("m", {})
    report = verify(memory_store.read(), steward_key.public, workers=1)
    assert report.valid and report.length == 6, report


@pytest.mark.parametrize("forged, at, needle", [
    (_chunked(chunks=3), 4, "3 chunks signed, 2 in the run before it"),
    (_chunked(digest=b"d" * 32), 4, "not the size and SHA-256 it signs"),
    (_chunked(indexes=(0, 2)), 3, "index 2 follows 1 chunks"),
    ([("checkpoint_chunk", {"index": 0, "data": "text"})], 2, "checkpoint_chunk: index is not a count"),
])
def test_a_checkpoint_whose_chunks_do_not_add_up_is_refused(build, steward_key, forged, at, needle):
    report = check(build(filler(1) + forged + filler(1)), steward_key.public)
    assert (report.reason, report.first_bad_index) == ("body", at) and needle in report.detail, report


def test_chunks_a_crash_left_without_their_checkpoint_are_not_a_fault(build, steward_key):
    stream = build(filler(1) + _chunked()[:1] + filler(1) + _chunked() + filler(1))
    assert check(stream, steward_key.public).valid


def _spread(first_chunk, between=1):
    """Two chunks with other receipts between and after them, and their
    checkpoint naming where the first lies (the third format, §9)."""
    chunk0, chunk1, (kind, body) = _chunked()
    return [chunk0, *filler(between), chunk1, *filler(between), (kind, {**body, "first_chunk": first_chunk})]


def test_a_checkpoint_whose_chunks_lie_among_other_receipts_verifies(build, steward_key):
    """docs/LEDGER.md §9: the chunks of a checkpoint with `first_chunk` are the
    run from that seq on, whatever lies between them."""
    assert check(build(filler(1) + _spread(first_chunk=2) + filler(1)), steward_key.public).valid


@pytest.mark.parametrize("forged, at, needle", [
    (_spread(first_chunk=3), 6, "its chunks begin at seq 2, not from seq 3"),
    (_spread(first_chunk=1), 6, "its chunks begin at seq 2, not from seq 1"),
    (_spread(first_chunk=5), 6, "first_chunk 5 is not a seq with its 2 chunks before it"),
    (_chunked()[:2] + filler(1) + _chunked()[2:], 5, "its chunks begin at seq 2, not right before it"),
])
def test_a_checkpoint_that_misplaces_its_chunks_is_refused(build, steward_key, forged, at, needle):
    """A checkpoint names where its run of chunks begins (without first_chunk,
    the second format: right before it), and a verifier holds it to that."""
    report = check(build(filler(1) + forged + filler(1)), steward_key.public)
    assert (report.reason, report.first_bad_index) == ("body", at) and needle in report.detail, report
