"""Ed25519 keys: the steward's (signs receipts) and a witness's (signs ledger heads).

Files: the private key is PKCS#8 PEM, created with mode 0600 and never overwritten;
the public key is SubjectPublicKeyInfo PEM. `load_public_key` also takes the raw
32-byte key, as bytes or as 64 hex digits. A key id is the first 16 bytes of the
SHA-256 of the raw 32-byte public key (docs/LEDGER.md).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

KEY_ID_BYTES = 16
_RAW = (serialization.Encoding.Raw, serialization.PublicFormat.Raw)


class KeyFileError(ValueError):
    """A key file that cannot be used; the message says which and why."""


def key_id(raw_public: bytes) -> bytes:
    return hashlib.sha256(raw_public).digest()[:KEY_ID_BYTES]


@dataclass(frozen=True)
class PublicKey:
    raw: bytes
    _key: Ed25519PublicKey = field(init=False, repr=False, compare=False)
    _key_id: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.raw) != 32:
            raise KeyFileError(f"an Ed25519 public key is 32 bytes, not {len(self.raw)}")
        object.__setattr__(self, "_key", Ed25519PublicKey.from_public_bytes(self.raw))
        object.__setattr__(self, "_key_id", key_id(self.raw))

    @property
    def key_id(self) -> bytes:
        return self._key_id

    def verifies(self, signature: bytes, message: bytes) -> bool:
        try:
            self._key.verify(signature, message)
            return True
        except InvalidSignature:
            return False


@dataclass(frozen=True)
class SigningKey:
    private: Ed25519PrivateKey = field(repr=False)
    public: PublicKey

    @classmethod
    def of(cls, private: Ed25519PrivateKey) -> SigningKey:
        return cls(private, PublicKey(private.public_key().public_bytes(*_RAW)))

    def sign(self, message: bytes) -> bytes:
        return self.private.sign(message)


def generate() -> SigningKey:
    return SigningKey.of(Ed25519PrivateKey.generate())


def write_pair(key: SigningKey, prefix: str | Path) -> tuple[Path, Path]:
    """PREFIX.key (0600, refused if it exists) and PREFIX.pub."""
    private_path, public_path = Path(f"{prefix}.key"), Path(f"{prefix}.pub")
    pem = key.private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    public_pem = key.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    public_path.write_bytes(public_pem)
    return private_path, public_path


def _read(path: str | Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise KeyFileError(f"cannot read {path}: {exc.strerror}") from None


def check_private(path: str | Path) -> None:
    """Refuse a private key file that group or others may read or write, as ssh does."""
    try:
        mode = os.stat(path).st_mode & 0o777
    except OSError as exc:
        raise KeyFileError(f"cannot read {path}: {exc.strerror}") from None
    if mode & 0o077:
        raise KeyFileError(f"{path} is accessible by group or others (mode {mode:04o}); "
                           f"a private key must be 0600: chmod 600 {path}")


def load_signing_key(path: str | Path) -> SigningKey:
    """A private key (KeyFileError if unreadable, not Ed25519, or open to group or others)."""
    check_private(path)
    try:
        private = serialization.load_pem_private_key(_read(path), password=None)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{path} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(private, Ed25519PrivateKey):
        raise KeyFileError(f"{path} is not an Ed25519 private key")
    return SigningKey.of(private)


def load_public_key(path: str | Path) -> PublicKey:
    data = _read(path)
    if len(data) == 32:
        return PublicKey(data)
    text = data.strip()
    if len(text) == 64:
        try:
            return PublicKey(bytes.fromhex(text.decode()))
        except ValueError:
            pass
    try:
        public = serialization.load_pem_public_key(data)
    except ValueError:
        raise KeyFileError(f"{path} is not a PEM, raw or hex Ed25519 public key") from None
    if not isinstance(public, Ed25519PublicKey):
        raise KeyFileError(f"{path} is not an Ed25519 public key")
    return PublicKey(public.public_bytes(*_RAW))


def public_key_from(text: str) -> PublicKey:
    """A public key named in configuration or on a command line: 64 hex digits, or a key file."""
    if len(text) == 64:
        try:
            return PublicKey(bytes.fromhex(text))
        except ValueError:
            pass
    return load_public_key(text)
