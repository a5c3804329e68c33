"""COSE_Sign1 (RFC 9052) with Ed25519, in exactly one byte layout:

    D2 84                      tag 18, array of 4
       55 A2 01 27 04 50 <kid> protected: bstr of {1: -8 (EdDSA), 4: kid (16 bytes)}
       A0                      unprotected: {}
       <bstr payload>          shortest-form length
       58 40 <signature>       64-byte Ed25519 signature

signed over Sig_structure ["Signature1", protected, h'', payload]. Any other layout
— even an equivalent one — is refused (reason `decode`; `non_canonical` for a
byte string's length not in shortest form, whichever of the three), so a
message has one encoding and its hash is stable.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.ledger.dcbor import DcborError
from scheduler.ledger.keys import KEY_ID_BYTES, PublicKey, SigningKey

_TAG18_ARRAY4 = b"\xd2\x84"
_PROTECTED_PREFIX = b"\xa2\x01\x27\x04" + bytes([0x40 + KEY_ID_BYTES])
_PROTECTED_LEN = len(_PROTECTED_PREFIX) + KEY_ID_BYTES
_SIGNATURE_HEAD = b"\x58\x40"   # its shortest head: 64 bytes
_CONTEXT = b"\x84\x6aSignature1"   # array of 4, text "Signature1"
_SHORT_HEADS = [bytes([0x40 + n]) for n in range(24)]


def bstr_head(length: int) -> bytes:
    """The shortest head of a byte string of this length (hot: twice per receipt)."""
    if length < 24:
        return _SHORT_HEADS[length]
    if length < 0x100:
        return bytes((0x58, length))
    if length < 0x10000:
        return b"\x59" + length.to_bytes(2, "big")
    if length < 1 << 32:
        return b"\x5a" + length.to_bytes(4, "big")
    return b"\x5b" + length.to_bytes(8, "big")


def protected_header(kid: bytes) -> bytes:
    return _PROTECTED_PREFIX + kid


@dataclass(frozen=True)
class Sign1:
    protected: bytes
    payload: bytes
    signature: bytes

    @property
    def key_id(self) -> bytes:
        return self.protected[len(_PROTECTED_PREFIX):]

    def to_be_signed(self) -> bytes:
        return (_CONTEXT + bstr_head(len(self.protected)) + self.protected + b"\x40"
                + bstr_head(len(self.payload)) + self.payload)

    def verifies(self, key: PublicKey) -> bool:
        return self.key_id == key.key_id and key.verifies(self.signature, self.to_be_signed())


def sign(key: SigningKey, payload: bytes) -> bytes:
    protected = bstr_head(_PROTECTED_LEN) + protected_header(key.public.key_id)
    payload = bstr_head(len(payload)) + payload
    signature = key.sign(_CONTEXT + protected + b"\x40" + payload)
    return _TAG18_ARRAY4 + protected + b"\xa0" + payload + _SIGNATURE_HEAD + signature


def _bstr(data: bytes, pos: int) -> tuple[bytes, int]:
    """A shortest-form byte string at pos: (its content, position after it)."""
    if pos >= len(data) or data[pos] >> 5 != 2:
        raise DcborError("decode", f"expected a byte string at byte {pos}")
    info = data[pos] & 31
    if info < 24:
        length, start = info, pos + 1
    elif info <= 27:
        start = pos + 1 + (1 << (info - 24))
        length = int.from_bytes(data[pos + 1:start], "big")
    else:
        raise DcborError("decode", f"indefinite or reserved length at byte {pos}")
    end = start + length
    if end > len(data):
        raise DcborError("decode", "truncated")
    if data[pos:start] != bstr_head(length):
        raise DcborError("non_canonical", f"length at byte {pos} is not in shortest form")
    return data[start:end], end


def parse(data: bytes, pos: int = 0) -> tuple[Sign1, int]:
    """The COSE_Sign1 starting at pos in data, and the position after it."""
    if data[pos:pos + 2] != _TAG18_ARRAY4:
        raise DcborError("decode", "not a tagged COSE_Sign1 (D2 84)")
    protected, pos = _bstr(data, pos + 2)
    if len(protected) != _PROTECTED_LEN or not protected.startswith(_PROTECTED_PREFIX):
        raise DcborError("decode", "protected header is not {1: -8, 4: 16-byte key id}")
    if data[pos:pos + 1] != b"\xa0":
        raise DcborError("decode", "unprotected header is not an empty map")
    payload, pos = _bstr(data, pos + 1)
    signature, end = _bstr(data, pos)
    if len(signature) != 64:
        raise DcborError("decode", "signature is not a 64-byte string")
    return Sign1(protected, payload, signature), end


def parse_whole(data: bytes) -> Sign1:
    message, end = parse(data)
    if end != len(data):
        raise DcborError("decode", f"{len(data) - end} bytes after the COSE_Sign1")
    return message
