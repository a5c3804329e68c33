"""Receipts: a pool/1 core, det-CBOR, signed by the steward as a COSE_Sign1.

The core is the map {"seq", "body", "kind", "prev", "profile", "time_ns"}, plus
"actor" (the principal whose call caused the receipt) when one is given, written
in canonical key order, and nothing else; a core without "actor" (every receipt
written before actors existed, genesis and checkpoints) is as valid as before. `prev` is the SHA-256 of the previous
receipt's full COSE bytes, 32 zero bytes for receipt 0. Kinds are the callers'
text; six belong to the ledger itself (see LEDGER_KINDS).
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

from scheduler.ledger import cose, dcbor
from scheduler.ledger.keys import SigningKey

PROFILE = "pool/1"
ZERO_HASH = bytes(32)
GENESIS = "genesis"         # receipt 0: {"steward_key": raw public key}
WITNESS = "witness"         # {"statement": a witness's COSE_Sign1}
CHECKPOINT = "checkpoint"   # {"chunks", "size", "digest", "witnessed_length", "witness_key_id"} (docs/LEDGER.md §9)
CHECKPOINT_CHUNK = "checkpoint_chunk"   # {"index", "data"}: a piece of the next checkpoint's state
LOSS_ACCEPTED = "loss_accepted"   # {"recorded_length", "recorded_head", "length"}: see store.Loss
COSIGNED = "cosigned_checkpoint"   # {"note": a C2SP checkpoint the steward signed and witnesses cosigned}
LEDGER_KINDS = frozenset({GENESIS, WITNESS, CHECKPOINT, CHECKPOINT_CHUNK, LOSS_ACCEPTED, COSIGNED})
_FIELDS = ("seq", "body", "kind", "prev", "profile", "time_ns")  # canonical order
ACTOR = "actor"   # optional core field: text, the principal's name (docs/LEDGER.md)


class ReceiptError(ValueError):
    """A receipt refused for `reason` (one of verify.REASONS)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Entry(NamedTuple):
    """What a fold sees of a receipt."""
    seq: int
    time_ns: int
    kind: str
    body: dict
    actor: str | None = None   # who caused it; None in receipts without the field


class Receipt(NamedTuple):
    raw: bytes      # the COSE_Sign1 bytes, as stored and exported
    entry: Entry
    hash: bytes     # SHA-256 of raw: the next receipt's prev


def digest(raw: bytes) -> bytes:
    return hashlib.sha256(raw).digest()


def make(key: SigningKey, seq: int, prev: bytes, time_ns: int, kind: str, body: dict,
         actor: str | None = None) -> Receipt:
    """Sign a receipt; `body` must already be dcbor.normalize'd (a dict)."""
    core = {"seq": seq, "body": body, "kind": kind, "prev": prev}
    if actor is not None:
        core[ACTOR] = actor   # canonical order: after the 4-letter keys, before the 7-letter ones
    core.update(profile=PROFILE, time_ns=time_ns)
    raw = cose.sign(key, dcbor.encode_normalized(core))
    return Receipt(raw, Entry(seq, time_ns, kind, body, actor), digest(raw))


class ReceiptTooLarge(ValueError):
    """A body that cannot become a receipt: its core would be over dcbor.MAX_BYTES,
    or it holds what det-CBOR cannot encode (an integer beyond 2⁶⁴−1)."""


# a core's bytes beyond its body's: the other five fields at their largest, and their keys
_CORE_OVERHEAD = len(dcbor.encode({"seq": (1 << 64) - 1, "body": {}, "kind": "", "prev": ZERO_HASH,
                                   "profile": PROFILE, "time_ns": (1 << 64) - 1})) - 1


def check_size(kind: str, body: dict) -> None:
    """ReceiptTooLarge unless a receipt of this kind and body (already
    dcbor.normalize'd) fits the core cap: checked before a record is folded,
    so one that cannot be written changes nothing."""
    try:
        size = len(dcbor.encode_normalized(body)) + len(kind.encode()) + _CORE_OVERHEAD
    except dcbor.DcborError as exc:
        raise ReceiptTooLarge(f"a {kind!r} receipt cannot be encoded: {exc}") from None
    if size > dcbor.MAX_BYTES:
        raise ReceiptTooLarge(f"a {kind!r} receipt would be {size:,} bytes, over the {dcbor.MAX_BYTES:,}-byte cap")


def _natural(value: Any) -> bool:
    return type(value) is int and value >= 0


def read_core(payload: bytes) -> tuple[Entry, bytes]:
    """The entry and prev of a receipt's payload; ReceiptError if it is not a pool/1 core."""
    try:
        core = dcbor.decode(payload)
    except dcbor.DcborError as exc:
        raise ReceiptError(exc.reason, f"core: {exc}") from None
    if type(core) is not dict or set(core) - {ACTOR} != set(_FIELDS):
        raise ReceiptError("profile", f"core fields are not exactly {', '.join(_FIELDS)} (and optionally {ACTOR})")
    if core["profile"] != PROFILE:
        raise ReceiptError("profile", f"profile {core['profile']!r} is not {PROFILE!r}")
    prev, kind = core["prev"], core["kind"]
    if not (_natural(core["seq"]) and _natural(core["time_ns"]) and type(kind) is str and kind
            and type(prev) is bytes and len(prev) == 32 and type(core["body"]) is dict):
        raise ReceiptError("profile", "a core field has the wrong type")
    actor = core.get(ACTOR)
    if actor is not None and not (type(actor) is str and actor):
        raise ReceiptError("profile", "the actor is a non-empty text string")
    return Entry(core["seq"], core["time_ns"], kind, core["body"], actor), prev
