"""Witness statements: a party with its own key signs (ledger id, length, head).

A statement is a COSE_Sign1 (same layout as a receipt) by the witness's key over the
det-CBOR map {"head", "type": "witness", "length", "profile": "pool/1", "time_ns",
"ledger_id", "witness_key"}. It carries the witness's raw public key so anyone can
check it; whether that key belongs to a trusted witness is the reader's decision,
made on the key id a verifier reports. It is evidence against rewriting the first
`length` receipts, not an endorsement of what they decided.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import NamedTuple

from scheduler.ledger import cose, dcbor
from scheduler.ledger.keys import PublicKey, SigningKey
from scheduler.ledger.receipts import PROFILE

_FIELDS = {"head", "type", "length", "profile", "time_ns", "ledger_id", "witness_key"}


class WitnessRejected(ValueError):
    """`code`: malformed, signature, untrusted_key, steward_key, other_ledger, beyond_length, head_mismatch."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Statement(NamedTuple):
    ledger_id: bytes
    length: int
    head: bytes
    witness: PublicKey
    time_ns: int


def sign_statement(key: SigningKey, steward: PublicKey, ledger_id: bytes, length: int,
                   head: bytes, time_ns: int | None = None) -> bytes:
    if key.public == steward:
        raise WitnessRejected("steward_key", "the witness key is the steward's own key")
    body = {"head": head, "type": "witness", "length": length, "profile": PROFILE,
            "time_ns": time.time_ns() if time_ns is None else time_ns,
            "ledger_id": ledger_id, "witness_key": key.public.raw}
    return cose.sign(key, dcbor.encode(body))


def _well_formed(fields: object) -> bool:
    return (type(fields) is dict and set(fields) == _FIELDS and fields["type"] == "witness"
            and fields["profile"] == PROFILE and type(fields["length"]) is int
            and type(fields["time_ns"]) is int
            and all(type(fields[k]) is bytes and len(fields[k]) == 32
                    for k in ("ledger_id", "head", "witness_key")))


def read_statement(data: bytes) -> Statement:
    """A statement whose signature verifies under the key it names."""
    try:
        message = cose.parse_whole(data)
        fields = dcbor.decode(message.payload)
    except dcbor.DcborError as exc:
        raise WitnessRejected("malformed", f"witness statement: {exc}") from None
    if not _well_formed(fields):
        raise WitnessRejected("malformed", "not a pool/1 witness statement")
    witness = PublicKey(fields["witness_key"])
    statement = Statement(fields["ledger_id"], fields["length"], fields["head"], witness,
                          fields["time_ns"])
    if not message.verifies(witness):
        raise WitnessRejected("signature", "the statement's signature does not verify")
    return statement


def check_trusted(statement: Statement, trusted: Collection[PublicKey]) -> None:
    """Refuse a statement whose key is not one of the trusted witnesses' keys."""
    if statement.witness not in trusted:
        raise WitnessRejected("untrusted_key", f"witness key {statement.witness.key_id.hex()} is not "
                                               "one of the trusted witness keys ([ledger] witness_keys)")


def check(statement: Statement, steward: PublicKey, ledger_id: bytes, length: int,
          hash_at: Callable[[int], bytes]) -> None:
    """Refuse a statement that is not about the first `length` receipts of this
    ledger as they are now; hash_at(i) is the SHA-256 of receipt i."""
    if statement.witness == steward:
        raise WitnessRejected("steward_key", "signed with the steward's own key")
    if statement.ledger_id != ledger_id:
        raise WitnessRejected("other_ledger", "the statement is about another ledger")
    if not 1 <= statement.length <= length:
        raise WitnessRejected("beyond_length",
                              f"witnessed length {statement.length} is not within 1..{length}")
    if statement.head != hash_at(statement.length - 1):
        raise WitnessRejected("head_mismatch",
                              f"receipt {statement.length - 1} is not the one witnessed")
