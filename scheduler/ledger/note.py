"""Checkpoints in the C2SP formats: a tlog-checkpoint body, signed as a C2SP
signed note by the steward and cosigned by witnesses per tlog-cosignature
(docs/LEDGER.md §11).

    checkpoint body   <origin>\\n<tree size, decimal>\\n<base64 root hash>\\n
    signed note       <body>\\n— <key name> <base64(key id ‖ signature)>\\n …
    note key id       SHA-256(key name ‖ 0x0A ‖ type ‖ public key)[:4]
                      type 0x01: Ed25519 over the body (the steward's signature)
                      type 0x04: cosignature/v1, whose signature is
                      timestamp (u64 big-endian) ‖ Ed25519 over
                      "cosignature/v1\\ntime <timestamp>\\n" ‖ body
    vkey              <key name>+<hex key id>+<base64(type ‖ public key)>

The origin, and the steward's key name, is `pool.invalid/ledger/<ledger id hex>`
unless the operator names another, so one ledger's checkpoints can never be
taken for another's.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from typing import NamedTuple

from scheduler.ledger.keys import PublicKey, SigningKey, public_key_from

ED25519 = 0x01        # signed-note signature type of a plain Ed25519 note signature
COSIGNATURE_V1 = 0x04  # tlog-cosignature: Ed25519 cosignature/v1
DASH = "\u2014 "       # a signature line starts with an em dash and a space
MAX_NOTE = 1 << 16    # bytes a checkpoint note may have here: three lines and a few signatures


class NoteError(ValueError):
    """Text that is not a well-formed note, checkpoint or vkey; the message says why."""


def origin_for(ledger_id: bytes) -> str:
    return f"pool.invalid/ledger/{ledger_id.hex()}"


def key_id(name: str, kind: int, public: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([kind]) + public).digest()[:4]


def _name_ok(name: str) -> bool:
    return bool(name) and not any(c.isspace() or c == "+" for c in name)


class Checkpoint(NamedTuple):
    origin: str
    size: int
    root: bytes

    def body(self) -> str:
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n"


def read_checkpoint(body: str) -> Checkpoint:
    """NoteError unless `body` is exactly three lines: origin, size, root (no extension lines)."""
    lines = body.split("\n")
    if len(lines) != 4 or lines[3] != "":
        raise NoteError("a checkpoint is three newline-terminated lines: origin, size, root hash")
    origin, size, root = lines[:3]
    if not origin or not size.isdigit() or (size != "0" and size.startswith("0")) or not size.isascii():
        raise NoteError("the origin is empty or the size is not a decimal without leading zeros")
    try:
        raw = base64.b64decode(root, validate=True)
    except binascii.Error:
        raise NoteError("the root hash is not base64") from None
    if len(raw) != 32 or base64.b64encode(raw).decode() != root:
        raise NoteError("the root hash is not 32 bytes in standard base64")
    return Checkpoint(origin, int(size), raw)


def _base64(text: str, what: str) -> bytes:
    """Standard base64 in its one canonical spelling (padding, zero spare bits):
    so a note has exactly one byte form, and no changed byte leaves it valid."""
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error:
        raise NoteError(f"{what} is not base64") from None
    if base64.b64encode(raw).decode() != text:
        raise NoteError(f"{what} is not in canonical base64")
    return raw


class Signature(NamedTuple):
    name: str
    key_id: bytes     # 4 bytes
    blob: bytes       # what follows the key id: the signature (with a cosignature's timestamp first)

    def line(self) -> str:
        return f"{DASH}{self.name} {base64.b64encode(self.key_id + self.blob).decode()}\n"


class Note(NamedTuple):
    body: str
    signatures: tuple[Signature, ...]

    def text(self) -> str:
        return self.body + "\n" + "".join(s.line() for s in self.signatures)

    def encoded(self) -> bytes:
        return self.text().encode()

    def with_signature(self, signature: Signature) -> Note:
        return Note(self.body, (*self.signatures, signature))


def read_note(raw: bytes) -> Note:
    """NoteError unless `raw` is a signed note: UTF-8 text, a body ending in a
    newline, a blank line, then one or more signature lines."""
    if len(raw) > MAX_NOTE:
        raise NoteError(f"a note over {MAX_NOTE} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise NoteError("a note is UTF-8 text") from None
    at = text.rfind("\n\n")
    if at < 0 or not text.endswith("\n"):
        raise NoteError("no blank line before the signatures, or no final newline")
    body, lines = text[:at + 1], text[at + 2:-1].split("\n")
    signatures = []
    for line in lines:
        if not line.startswith(DASH):
            raise NoteError("a signature line starts with an em dash and a space")
        parts = line[len(DASH):].split(" ")
        if len(parts) != 2 or not _name_ok(parts[0]):
            raise NoteError("a signature line is: name, one space, base64")
        blob = _base64(parts[1], "a signature")
        if len(blob) < 5:
            raise NoteError("a signature is shorter than its key id")
        signatures.append(Signature(parts[0], blob[:4], blob[4:]))
    return Note(body, tuple(signatures))


# -- the steward's signature -------------------------------------------------------

def sign(body: str, name: str, key: SigningKey) -> Note:
    return Note(body, (Signature(name, key_id(name, ED25519, key.public.raw), key.sign(body.encode())),))


def signed_by(note: Note, name: str, key: PublicKey) -> bool:
    """The note carries a good Ed25519 signature by (name, key)."""
    kid = key_id(name, ED25519, key.raw)
    return any(s.name == name and s.key_id == kid and len(s.blob) == 64 and key.verifies(s.blob, note.body.encode())
               for s in note.signatures)


# -- cosignatures (tlog-cosignature, cosignature/v1) -------------------------------

def cosigned_message(body: str, timestamp: int) -> bytes:
    return f"cosignature/v1\ntime {timestamp}\n".encode() + body.encode()


def cosign(body: str, name: str, key: SigningKey, timestamp: int) -> Signature:
    if not 0 <= timestamp < 1 << 63:
        raise NoteError("a cosignature's timestamp is below 2^63")
    signature = key.sign(cosigned_message(body, timestamp))
    return Signature(name, key_id(name, COSIGNATURE_V1, key.public.raw), struct.pack(">Q", timestamp) + signature)


def cosigned_by(note: Note, name: str, key: PublicKey) -> int | None:
    """The timestamp of a good cosignature/v1 by (name, key) on the note, or None."""
    kid = key_id(name, COSIGNATURE_V1, key.raw)
    for s in note.signatures:
        if s.name == name and s.key_id == kid and len(s.blob) == 72:
            (timestamp,) = struct.unpack(">Q", s.blob[:8])
            if timestamp < 1 << 63 and key.verifies(s.blob[8:], cosigned_message(note.body, timestamp)):
                return timestamp
    return None


# -- verifier keys -----------------------------------------------------------------

class VKey(NamedTuple):
    name: str
    kind: int           # ED25519 or COSIGNATURE_V1
    key: PublicKey

    def text(self) -> str:
        raw = bytes([self.kind]) + self.key.raw
        return f"{self.name}+{key_id(self.name, self.kind, self.key.raw).hex()}+{base64.b64encode(raw).decode()}"


def read_vkey(text: str) -> VKey:
    """NoteError unless `text` is a vkey with an Ed25519 key (type 0x01 or 0x04)
    whose key id matches its name and key."""
    parts = text.strip().split("+", 2)   # the name holds no '+'; the base64 may
    if len(parts) != 3 or not _name_ok(parts[0]) or len(parts[1]) != 8:
        raise NoteError("a vkey is <name>+<8 hex digits>+<base64 key>")
    try:
        wanted = bytes.fromhex(parts[1])
    except ValueError:
        raise NoteError("a vkey's key id is not hex") from None
    raw = _base64(parts[2], "a vkey's key")
    if len(raw) != 33 or raw[0] not in (ED25519, COSIGNATURE_V1):
        raise NoteError("a vkey here is an Ed25519 key: type 0x01 or 0x04 and 32 bytes")
    if key_id(parts[0], raw[0], raw[1:]) != wanted:
        raise NoteError("the vkey's key id does not match its name and key")
    return VKey(parts[0], raw[0], PublicKey(raw[1:]))


def witness_keys(text: str) -> tuple:
    """What one `[ledger] witness_keys` entry trusts: a vkey (type 0x04: its
    cosignatures, and its key's pool/1 statements), or a key file / 64 hex
    digits (pool/1 statements, §8). NoteError or keys.KeyFileError if neither."""
    if text.count("+") >= 2 and not text.startswith(("/", ".")):
        vkey = read_vkey(text)
        return (vkey, vkey.key)
    return (public_key_from(text),)
