"""A claim proof as a file (`poolctl ledger prove`), and its check, which needs
no server and no ledger (`poolctl ledger check-proof`; docs/LEDGER.md §11):

    {"format": "pool-proof/1", "claim_id": text,
     "checkpoint": the cosigned checkpoint note, as text,
     "receipts": [{"seq": uint, "receipt": hex COSE_Sign1, "path": [hex 32-byte hashes]}],
     "pending": [uint],  "since_size": uint,  "consistency": [hex 32-byte hashes]}

A proof holds when: the checkpoint is a C2SP checkpoint signed by the
steward's key under its origin; every trusted witness named cosigned it
(cosignature/v1); each receipt is a receipt the steward signed, with seq equal
to its leaf index, naming the claim, included in the checkpoint's tree by its
path; and, given an earlier checkpoint the reader trusts, the consistency
proof takes that tree to this one. The first thing that fails is the reason.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from scheduler.ledger import cose, dcbor, merkle, note
from scheduler.ledger.index import claim_of
from scheduler.ledger.keys import PublicKey
from scheduler.ledger.receipts import ReceiptError, read_core

FORMAT = "pool-proof/1"
SET_FORMAT = "pool-proof-set/1"   # {"format", "tenant", "since_ns", "until_ns", "proofs": [pool-proof/1 …]}


class ProofInvalid(ValueError):
    """`reason`: format, checkpoint, steward_signature, cosignature, receipt,
    inclusion, claim, consistency."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Fact(NamedTuple):
    seq: int
    kind: str
    time_ns: int
    actor: str | None
    body: Any


class Checked(NamedTuple):
    claim_id: str
    origin: str
    size: int
    root: bytes
    witnesses: tuple[str, ...]       # the trusted witnesses that cosigned, by name
    facts: tuple[Fact, ...]          # the receipts proven, in seq order
    pending: tuple[int, ...]         # receipts the checkpoint does not cover yet


def document(claim_id: str, checkpoint: bytes, receipts: Sequence[tuple[int, bytes, Sequence[bytes]]],
             pending: Sequence[int], since_size: int, consistency: Sequence[bytes]) -> dict:
    return {"format": FORMAT, "claim_id": claim_id, "checkpoint": checkpoint.decode(),
            "receipts": [{"seq": seq, "receipt": raw.hex(), "path": [h.hex() for h in path]}
                         for seq, raw, path in receipts],
            "pending": list(pending), "since_size": since_size, "consistency": [h.hex() for h in consistency]}


def _hashes(values: Any, what: str) -> list[bytes]:
    if type(values) is not list or not all(type(v) is str for v in values):
        raise ProofInvalid("format", f"{what} is not a list of hex strings")
    try:
        out = [bytes.fromhex(v) for v in values]
    except ValueError:
        raise ProofInvalid("format", f"{what} holds a value that is not hex") from None
    if any(len(h) != 32 for h in out):
        raise ProofInvalid("format", f"{what} holds a hash that is not 32 bytes")
    return out


def read(raw: bytes) -> dict:
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProofInvalid("format", f"not JSON: {exc}") from None
    if type(doc) is not dict or doc.get("format") not in (FORMAT, SET_FORMAT):
        raise ProofInvalid("format", f"not a {FORMAT} or {SET_FORMAT} document")
    return doc


def proofs_in(doc: dict) -> list[dict]:
    """The claim proofs of a document: itself, or each of a set's."""
    if doc.get("format") == FORMAT:
        return [doc]
    proofs = doc.get("proofs")
    if type(proofs) is not list or not all(type(p) is dict and p.get("format") == FORMAT for p in proofs):
        raise ProofInvalid("format", f"a {SET_FORMAT} document's proofs are {FORMAT} documents")
    return proofs


def check(doc: dict, steward: PublicKey, witnesses: Sequence[note.VKey] = (),
          since: note.Checkpoint | None = None) -> Checked:
    """ProofInvalid, with the first reason, unless the proof holds (module doc)."""
    claim_id, text = doc.get("claim_id"), doc.get("checkpoint")
    if type(claim_id) is not str or type(text) is not str or type(doc.get("receipts")) is not list:
        raise ProofInvalid("format", "claim_id, checkpoint or receipts is missing or of the wrong type")
    try:
        signed = note.read_note(text.encode())
        checkpoint = note.read_checkpoint(signed.body)
    except note.NoteError as exc:
        raise ProofInvalid("checkpoint", f"checkpoint: {exc}") from None
    if not note.signed_by(signed, checkpoint.origin, steward):
        raise ProofInvalid("steward_signature", "the checkpoint carries no good signature by the steward's key")
    for vkey in witnesses:
        if note.cosigned_by(signed, vkey.name, vkey.key) is None:
            raise ProofInvalid("cosignature", f"witness {vkey.name} did not cosign the checkpoint")
    facts = []
    for item in doc["receipts"]:
        if type(item) is not dict or type(item.get("seq")) is not int or type(item.get("receipt")) is not str:
            raise ProofInvalid("format", "a receipt entry is not {seq, receipt, path}")
        seq, path = item["seq"], _hashes(item.get("path"), f"receipt {item['seq']}'s path")
        try:
            raw = bytes.fromhex(item["receipt"])
            message = cose.parse_whole(raw)
            entry, _ = read_core(message.payload)
        except (ValueError, dcbor.DcborError, ReceiptError) as exc:
            raise ProofInvalid("receipt", f"receipt {seq}: {exc}") from None
        if message.key_id != steward.key_id or not message.verifies(steward):
            raise ProofInvalid("receipt", f"receipt {seq}: not signed by the steward's key")
        if entry.seq != seq:
            raise ProofInvalid("receipt", f"receipt {seq}: its core says seq {entry.seq}")
        if not merkle.verify_inclusion(seq, checkpoint.size, merkle.leaf_hash(raw), path, checkpoint.root):
            raise ProofInvalid("inclusion", f"receipt {seq} is not in the checkpoint's tree of {checkpoint.size}")
        if claim_of(entry.body) != claim_id:
            raise ProofInvalid("claim", f"receipt {seq} does not name claim {claim_id!r}")
        facts.append(Fact(seq, entry.kind, entry.time_ns, entry.actor, entry.body))
    if since is not None:
        proof = _hashes(doc.get("consistency"), "consistency")
        if since.origin != checkpoint.origin or doc.get("since_size") != since.size or not \
                merkle.verify_consistency(since.size, checkpoint.size, since.root, checkpoint.root, proof):
            raise ProofInvalid("consistency", f"the checkpoint of {checkpoint.size} is not an extension of the "
                                              f"earlier one of {since.size}")
    pending = doc.get("pending", [])
    if type(pending) is not list or not all(type(p) is int for p in pending):
        raise ProofInvalid("format", "pending is not a list of seqs")
    return Checked(claim_id, checkpoint.origin, checkpoint.size, checkpoint.root,
                   tuple(v.name for v in witnesses), tuple(facts), tuple(pending))
