"""A ClusterState as a det-CBOR-friendly body and back, for signed ledger
checkpoints: start-up restores the state at the checkpoint and replays only
the receipts after it.

Only primary records travel (configuration, workers, claims, counters);
every derived index is recomputed by `rebuild`, so a restored state equals
the replayed one whatever the indexes' representation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .codec import decode, encode, encode_compact
from .fast.pmap import PMap
from .reasons import OPEN_STATES
from .snapshot import Claim, ClassStats, ClusterState, IdlePolicy, Tenant, WorkClass, Worker
from .transitions import rebuild
from .tree import load_tree


def claims_body(state: ClusterState) -> list[dict[str, Any]]:
    """The claims as a checkpoint holds them: in id order, defaults left out."""
    return [encode_compact(state.claims[c]) for c in sorted(state.claims)]


def snapshot(state: ClusterState, claims: Callable[[ClusterState], Any] = claims_body) -> dict[str, Any]:
    """`claims`: claims_body, or what the caller knows to encode the same (the
    scheduler's, which keeps each unchanged claim's encoding: service/encoded.py)."""
    tree = state.tree
    return {
        "tenants": [encode(tree.nodes[n]) for n in tree.order] if tree is not None else None,
        "period_ns": state.period_ns, "epoch_ns": state.epoch_ns, "period_index": state.period_index,
        "classes": [encode(state.classes[c]) for c in sorted(state.classes)],
        "idle": encode(state.idle), "config_digest": state.config_digest,
        "workers": [encode(state.workers[w]) for w in sorted(state.workers)],
        "acked": {w: state.acked[w] for w in sorted(state.acked)},
        "claims": claims(state),
        "settled": sorted(state.settled),
        "class_stats": {c: encode(state.class_stats[c]) for c in sorted(state.class_stats)},
        "next_seq": state.next_seq, "next_admit_seq": state.next_admit_seq,
    }


def restore(body: dict[str, Any]) -> ClusterState:
    tenants = body["tenants"]
    state = ClusterState(
        tree=load_tree(decode(tuple[Tenant, ...], tenants)) if tenants is not None else None,
        period_ns=body["period_ns"], epoch_ns=body["epoch_ns"], period_index=body["period_index"],
        classes=PMap({c.name: c for c in decode(tuple[WorkClass, ...], body["classes"])}),
        idle=decode(IdlePolicy, body["idle"]), config_digest=body["config_digest"],
        workers=PMap({w.worker_id: w for w in decode(tuple[Worker, ...], body["workers"])}),
        acked=PMap(body["acked"]),
        claims=PMap({c.claim_id: c for c in decode(tuple[Claim, ...], body["claims"])}),
        settled=PMap(dict.fromkeys(body["settled"], True)),
        class_stats=PMap({k: decode(ClassStats, v) for k, v in body["class_stats"].items()}),
        next_seq=body["next_seq"], next_admit_seq=body["next_admit_seq"])
    return rebuild(state)


def compacted(state: ClusterState) -> ClusterState:
    """The state without the history that no accounting figure needs any more:
    claims that ended (settled, refused or withdrawn) before the current
    accounting period began. Usage counts only the current period's actuals
    (RULES §3) and class statistics are kept as sums, so nothing reads them;
    the ledger keeps their receipts. With no period (lifetime accounting)
    every actual counts, and nothing is dropped."""
    if not state.period_ns:
        return state
    start = state.epoch_ns + state.period_index * state.period_ns
    claims = state.claims
    for claim in state.claims.values():
        if claim.state not in OPEN_STATES and claim.claim_id not in state.settled and claim.settled_ns < start:
            claims = claims.delete(claim.claim_id)
    return state if claims is state.claims else state._replace(claims=claims)
