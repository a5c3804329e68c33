"""C2SP signed notes, checkpoints, cosignatures and vkeys (note.py), anchored
to vectors published by other implementations: golang.org/x/mod/sumdb/note's
PeterNeumann note (Ed25519 is deterministic, so our signature must be the
published one byte for byte) and a type 0x04 cosigner vkey of
transparency-dev/formats."""

import base64

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.ledger import keys, note

PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
PETER_NOTE = PETER_TEXT + "\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
COSIGNER_VKEY = "remora.n621.de+da77ade7+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2"


def peter_key():
    seed = base64.b64decode(PETER_SKEY.split("+", 4)[4])[1:]
    return keys.SigningKey.of(Ed25519PrivateKey.from_private_bytes(seed))


def test_our_signed_note_is_the_go_reference_byte_for_byte():
    vkey = note.read_vkey(PETER_VKEY)
    assert vkey.key == peter_key().public and vkey.kind == note.ED25519 and vkey.text() == PETER_VKEY
    assert note.sign(PETER_TEXT, "PeterNeumann", peter_key()).text() == PETER_NOTE
    read = note.read_note(PETER_NOTE.encode())
    assert read.body == PETER_TEXT and note.signed_by(read, "PeterNeumann", vkey.key)
    tampered = note.read_note(PETER_NOTE.replace("cryptography", "cryptographY").encode())
    assert not note.signed_by(tampered, "PeterNeumann", vkey.key)


PLUS_VKEY = "TEST+7997405c+AQcC+FTVKf0jlTdHDY3rbevmnKxxPjigCXlVtGe6RIr6"   # transparency-dev/formats: '+' in the base64


def test_a_vkey_whose_base64_holds_a_plus_reads():
    vkey = note.read_vkey(PLUS_VKEY)
    assert vkey.name == "TEST" and vkey.kind == note.ED25519 and vkey.text() == PLUS_VKEY


def test_a_cosigner_vkey_of_type_4_reads_and_a_wrong_one_does_not():
    vkey = note.read_vkey(COSIGNER_VKEY)
    assert vkey.kind == note.COSIGNATURE_V1 and vkey.name == "remora.n621.de" and vkey.text() == COSIGNER_VKEY
    for bad in (COSIGNER_VKEY.replace("da77", "da78"), COSIGNER_VKEY[:-2], "a+b", "x y+da77ade7+" + COSIGNER_VKEY[-44:]):
        with pytest.raises(note.NoteError):
            note.read_vkey(bad)


def test_a_cosignature_signs_its_time_and_the_checkpoint():
    steward, witness = keys.generate(), keys.generate()
    body = note.Checkpoint("pool.invalid/ledger/ab", 7, bytes(range(32))).body()
    assert note.read_checkpoint(body) == ("pool.invalid/ledger/ab", 7, bytes(range(32)))
    signed = note.sign(body, "pool.invalid/ledger/ab", steward)
    cosigned = signed.with_signature(note.cosign(body, "w.example/1", witness, 1_700_000_000))
    again = note.read_note(cosigned.encoded())
    assert note.signed_by(again, "pool.invalid/ledger/ab", steward.public)
    assert note.cosigned_by(again, "w.example/1", witness.public) == 1_700_000_000
    assert note.cosigned_by(again, "w.example/2", witness.public) is None
    assert not note.signed_by(again, "pool.invalid/ledger/ab", witness.public)
    message = note.cosigned_message(body, 1_700_000_000)
    assert message.startswith(b"cosignature/v1\ntime 1700000000\npool.invalid/ledger/ab\n7\n")
    line = again.signatures[1]
    assert line.key_id == note.key_id("w.example/1", 0x04, witness.public.raw) and len(line.blob) == 72


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_any_changed_byte_of_a_cosigned_checkpoint_fails_it(data):
    steward, witness = KEYS
    body = note.Checkpoint("o", 12, bytes(32)).body()
    raw = bytearray(note.sign(body, "o", steward).with_signature(note.cosign(body, "w", witness, 5)).encoded())
    at = data.draw(st.integers(0, len(raw) - 1))
    raw[at] ^= 1 << data.draw(st.integers(0, 7))
    try:
        read = note.read_note(bytes(raw))
    except note.NoteError:
        return
    if read.body != body:
        assert not (note.signed_by(read, "o", steward.public) and note.cosigned_by(read, "w", witness.public))
    else:
        assert not (note.signed_by(read, "o", steward.public) and note.cosigned_by(read, "w", witness.public) == 5)


KEYS = (keys.generate(), keys.generate())


@pytest.mark.parametrize("body", ["o\n1\n", "o\n01\nAAAA\n", "o\n1\n" + "A" * 43 + "=\nextra\n", "\n1\nAA==\n",
                                  "o\n-1\n" + base64.b64encode(bytes(32)).decode() + "\n"])
def test_malformed_checkpoints_are_refused(body):
    with pytest.raises(note.NoteError):
        note.read_checkpoint(body)


@pytest.mark.parametrize("raw", [b"no blank line\n", "body\n\nnot a signature\n".encode(), b"\xff\n\n",
                                 "body\n\n\u2014 name AAAA\n".encode(), "body\n\n\u2014 name AAAAAAA=".encode()])
def test_malformed_notes_are_refused(raw):
    with pytest.raises(note.NoteError):
        note.read_note(raw)
