"""The Proofs service: C2SP checkpoints for witnesses to cosign, and proofs a
tenant checks offline that its claim's receipts are in the log the witnesses
saw (docs/LEDGER.md §11). Reads of the stored tree are blocking (SQLite or
PostgreSQL point reads), so they run in a thread."""

from __future__ import annotations

import asyncio

from protos.pool.v1 import proofs_pb2, proofs_pb2_grpc
from scheduler.kernel import ClusterState
from scheduler.ledger import cose, note
from scheduler.ledger.receipts import read_core
from scheduler.ledger.steward import Steward
from scheduler.ledger.witness import WitnessRejected
from scheduler.service.engine import Engine, LedgerFailed
from scheduler.service import names
from scheduler.service.errors import Refused, guarded
from scheduler.service.principal import caller


def claim_proof(steward: Steward, claim_id: str, since_size: int) -> proofs_pb2.ClaimProof:
    """The claim's receipts with an inclusion proof each against the latest
    cosigned checkpoint, and the consistency proof from since_size to it."""
    seqs = steward.claim_seqs(claim_id)
    if not seqs:
        raise Refused("UNKNOWN_CLAIM", f"no receipt names claim {claim_id!r}")
    answer = proofs_pb2.ClaimProof(claim_id=claim_id, steward_key=steward.steward_key.raw, since_size=since_size)
    cosigned = steward.cosigned
    size = note.read_checkpoint(cosigned.body).size if cosigned is not None else 0
    if since_size > size:
        raise Refused("INVALID_ARGUMENT", f"since_size {since_size} is beyond the latest cosigned checkpoint ({size})")
    proofs = steward.proofs
    for seq in seqs:
        if seq >= size:
            answer.pending.append(seq)
            continue
        answer.receipts.append(proofs_pb2.ProvenReceipt(seq=seq, receipt=next(steward.read(seq, seq + 1)),
                                                        path=proofs.inclusion(seq, size)))
    if cosigned is not None:
        answer.checkpoint = cosigned.encoded()
        answer.consistency.extend(proofs.consistency(since_size, size) if since_size else [])
    return answer


def subtree_proof(steward: Steward, state: ClusterState, tenant: str, since_ns: int, until_ns: int,
                  since_size: int) -> proofs_pb2.SubtreeProof:
    """ProveClaim's answer for each claim the scheduler holds in the tenant's
    subtree, keeping the receipts whose time_ns is in [since_ns, until_ns)."""
    tree = state.tree
    if tree is None or tenant not in tree.nodes:
        raise Refused("UNKNOWN_TENANT", f"no tenant {tenant!r}")
    answer = proofs_pb2.SubtreeProof(tenant=tenant)
    for claim_id in sorted(c for c, claim in state.claims.items() if tenant in tree.path(claim.tenant)):
        proof = claim_proof(steward, claim_id, since_size)
        kept = [r for r in proof.receipts if _in_range(r.receipt, since_ns, until_ns)]
        pending = [seq for seq in proof.pending
                   if _in_range(next(steward.read(seq, seq + 1)), since_ns, until_ns)]
        if kept or pending:
            del proof.receipts[:]
            proof.receipts.extend(kept)
            del proof.pending[:]
            proof.pending.extend(pending)
            answer.claims.append(proof)
    return answer


def _in_range(raw: bytes, since_ns: int, until_ns: int) -> bool:
    time_ns = read_core(cose.parse_whole(raw).payload)[0].time_ns
    return since_ns <= time_ns and (until_ns == 0 or time_ns < until_ns)


def signed_checkpoint(steward: Steward, old_size: int) -> proofs_pb2.Checkpoint:
    signed = steward.signed_checkpoint()
    size = note.read_checkpoint(signed.body).size
    if old_size > size:
        raise Refused("INVALID_ARGUMENT", f"old_size {old_size} is beyond the ledger's {size} receipts")
    return proofs_pb2.Checkpoint(note=signed.encoded(), old_size=old_size,
                                 consistency=steward.proofs.consistency(old_size, size) if old_size else [])


class ProofsServicer(proofs_pb2_grpc.ProofsServicer):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def _steward(self) -> Steward:
        assert self.engine.writer is not None
        return self.engine.writer.steward

    @guarded
    async def GetCheckpoint(self, request, context):
        return await asyncio.to_thread(signed_checkpoint, self._steward, request.old_size)

    @guarded
    async def AddCosignature(self, request, context):
        cosigners = [k for k in self.engine.witness_keys if isinstance(k, note.VKey)]
        try:
            prepared = await asyncio.to_thread(self._steward.prepare_cosigned, request.note, cosigners,
                                               caller().name)
        except WitnessRejected as error:
            raise Refused("WITNESS_REJECTED", f"{error.code}: {error}") from None
        try:   # shielded: a caller that goes away must not cancel the ledger's future
            await asyncio.shield(self.engine.writer.enqueue(prepared))
        except Exception as exc:   # its append failed: LEDGER_UNAVAILABLE (errors.guarded), not UNKNOWN
            raise LedgerFailed(str(exc)) from exc
        return proofs_pb2.Checkpoint(note=request.note)

    @guarded
    async def ProveSubtree(self, request, context):
        return await asyncio.to_thread(subtree_proof, self._steward, self.engine.read().state, request.tenant,
                                       request.since_ns, request.until_ns, request.since_size)

    @guarded
    async def ProveClaim(self, request, context):
        return await asyncio.to_thread(claim_proof, self._steward, self._key(request), request.since_size)

    def _key(self, request) -> str:
        """The key the claim's receipts record (names.py): resolved in the
        caller's reach, or, for a claim the scheduler no longer holds, as
        written (TENANT/ID with a tenant, else the id an older ledger keys by)."""
        try:
            return names.resolve(self.engine.read().state, request.claim_id, request.tenant, caller())
        except Refused as refusal:
            if refusal.code != "UNKNOWN_CLAIM":
                raise
        return names.key(request.tenant, request.claim_id) if request.tenant else request.claim_id
