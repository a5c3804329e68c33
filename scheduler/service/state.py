"""The service's state as one immutable record, and the one pure fold from
receipts to it.

`ServiceState` is everything the scheduler knows that its receipts decide:
the kernel's `ClusterState`, and the service's own figures beside it (the
receipt that last changed each claim's status and each host's occupancy,
who submitted and who released each claim, and each device's last counted
window end). `fold(state, receipt) -> state` is the only way a receipt
changes it, live and in replay, so a replay of the ledger rebuilds exactly
what the live process had; `decided` stamps a schedule pass's events, whose
kernel state the pass itself computed (each event applied once,
ARCHITECTURE.md). Both stamp through `stamped`: the one place a record's
seq and actor are written down.

What the fold leaves out is not in the ledger's order of things: the
bounded projections (split rows, gaps, observations: windows/projections.py)
and the occupancy versions sent to agents (windows/occupancy.py) are fed
from each `Step` by the engine, beside the state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from scheduler.kernel import (Claim, ClaimAdmitted, ClaimBound, ClaimRefused, ClaimSubmitted, ClusterState, Event, Progress,
                              apply, checkpoint, counted, event_from_body)
from scheduler.kernel.events import Released, Settled
from scheduler.kernel.fast.pmap import PMap
from scheduler.ledger.receipts import Entry
from scheduler.service.windows.batch import WINDOWS, Windows, windows_from_body
from scheduler.service.windows.projections import metered

ACTOR_MAPS = ("submitted_by", "released_by")


class ServiceState(NamedTuple):
    kernel: ClusterState = ClusterState()
    claim_seq: PMap = PMap()       # claim id -> the receipt that last changed its status
    # worker -> the receipt that last changed its occupancy: the version pushed to its agent,
    # increasing across restarts because replay rebuilds it
    occupancy_seq: PMap = PMap()
    submitted_by: PMap = PMap()    # claim id -> the principal whose call submitted it (receipt actors)
    released_by: PMap = PMap()     # claim id -> the principal whose Release ended it
    # per host, per device: the end_ns of its last counted window (evidence.py's "starts no
    # earlier than the previous window ended"); each host's map is replaced whole, never changed
    window_ends: PMap = PMap()


class Receipt(NamedTuple):
    """A record as the fold takes it: its kind and body, the seq it has (or
    will have) in the ledger, its actor, and optionally what the body was made
    from (the event, or the windows), which live commits pass to spare
    decoding; both give the same state, since bodies round-trip exactly."""

    kind: str
    body: dict[str, Any]
    seq: int
    actor: str | None = None
    built: Any = None


class Step(NamedTuple):
    """One receipt folded: the state it leads to, the kernel event it was
    (None for windows already counted), the claims whose status and the hosts
    whose occupancy it changed, and, for `windows`, the host and its new windows."""

    state: ServiceState
    event: Event | None
    claims: frozenset[str] = frozenset()
    workers: frozenset[str] = frozenset()
    worker: str = ""
    windows: Windows | None = None


def fold(state: ServiceState, receipt: Receipt) -> ServiceState:
    """The state after `receipt`: pure."""
    return step(state, receipt).state


def fold_entry(state: ServiceState, entry: Entry) -> ServiceState:
    """`fold` of a ledger entry: a replay's apply (ledger/fold.py), projections aside."""
    return fold(state, Receipt(entry.kind, entry.body, entry.seq, entry.actor))


def step(state: ServiceState, receipt: Receipt) -> Step:
    """`fold`, with what it changed."""
    if receipt.kind == WINDOWS:
        worker, windows = ((receipt.body["worker"], receipt.built) if receipt.built is not None
                           else windows_from_body(receipt.body))
        fresh = windows.since(counted(state.kernel, worker))   # a window is counted once
        if not fresh.seq:
            return Step(state, None)
        event = metered(state.kernel, worker, fresh)
        ends = state.window_ends
        state = state._replace(window_ends=ends.set(worker, {**ends.get(worker, {}),
                                                             **dict(zip(fresh.device, fresh.end_ns))}))
        after = state._replace(kernel=apply(state.kernel, event))
        return Step(after, event, worker=worker, windows=fresh)
    event = receipt.built if receipt.built is not None else event_from_body(receipt.kind, receipt.body)
    after = state._replace(kernel=apply(state.kernel, event))
    after, claims, workers = stamped(after, event, receipt.seq, receipt.actor)
    return Step(after, event, claims, workers)


def decided(state: ServiceState, result: ClusterState, events: Iterable[Event], seqs: Iterable[int],
            actor: str | None) -> tuple[ServiceState, list[Step]]:
    """A schedule pass's events, already applied by the pass (`result` is the
    kernel state they lead to), stamped with their receipts' seqs: the state
    after them, and a Step for each."""
    steps = []
    state = state._replace(kernel=result)
    for event, seq in zip(events, seqs):
        state, claims, workers = stamped(state, event, seq, actor)
        steps.append(Step(state, event, claims, workers))
    return state, steps


def stamped(state: ServiceState, event: Event, seq: int, actor: str | None
            ) -> tuple[ServiceState, frozenset[str], frozenset[str]]:
    """Stamp the claims and workers `event` changes with its receipt's seq,
    and the claim with its actor (who submitted it, who released it); `state`
    is any state from the event on. With the claims and workers it changed."""
    claims, workers = touched(state.kernel, event)
    claim_seq, occupancy_seq = state.claim_seq, state.occupancy_seq
    for claim_id in claims:
        claim_seq = claim_seq.set(claim_id, seq)
    for host in workers:
        occupancy_seq = occupancy_seq.set(host, seq)
    state = state._replace(claim_seq=claim_seq, occupancy_seq=occupancy_seq)
    if actor is not None:
        if isinstance(event, ClaimSubmitted):
            state = state._replace(submitted_by=state.submitted_by.set(event.spec.claim_id, actor))
        elif isinstance(event, Released):
            state = state._replace(released_by=state.released_by.set(event.claim_id, actor))
    return state, claims, workers


def touched(after: ClusterState, event: Event) -> tuple[frozenset[str], frozenset[str]]:
    """Claims whose status an event changes (metering is not a status change),
    and workers whose occupancy it changes. `after` is any state from the
    event on: a settled claim keeps the worker it was admitted on (none if it
    was settled while pending), and is never admitted again."""
    if isinstance(event, ClaimSubmitted):
        return frozenset((event.spec.claim_id,)), frozenset()
    if isinstance(event, ClaimAdmitted):
        occupied = _occupies(after.claims[event.claim_id])
        return frozenset((event.claim_id,)), frozenset((event.worker,) if occupied else ())
    if isinstance(event, ClaimBound):   # RULES §10: the claims it moves, and their host's occupancy
        return frozenset(b.claim_id for b in event.bindings), frozenset((event.worker_id,))
    if isinstance(event, (ClaimRefused, Progress, Settled)):
        claim = after.claims[event.claim_id]
        freed = isinstance(event, Settled) and claim.worker and _occupies(claim)
        return frozenset((event.claim_id,)), frozenset((claim.worker,) if freed else ())
    return frozenset(), frozenset()


def _occupies(claim: Claim) -> bool:
    """Whether a claim is one of its host's occupants (RULES §2): it holds a GPU
    share or reserved CPU. One with neither is in no device's split, so its
    coming and going is no new occupancy version: a busy host's versions then
    change only when a split does, and windows spooled under one stay checkable."""
    return bool(claim.devices) or claim.spec.resources.cpu_millis > 0


# -- checkpoints ----------------------------------------------------------------

def snapshot(state: ServiceState, encoded: Any = None) -> dict[str, Any]:
    """What a checkpoint holds: the kernel's state and the service's figures.
    The projections are not kept: after a restart from a checkpoint they start
    again from new windows (OPERATIONS.md)."""
    def by_id(name: str) -> Any:   # a map keyed by claim id: kept encoded (encoded.py), or plainly
        entries = getattr(state, name)
        return encoded.map(name, entries) if encoded is not None else dict(sorted(entries.items()))

    body = {"kernel": checkpoint.snapshot(state.kernel, encoded.claims if encoded is not None else
                                          checkpoint.claims_body),
            "claim_seq": by_id("claim_seq"),
            "occupancy_seq": dict(sorted(state.occupancy_seq.items())),
            "window_ends": {w: dict(sorted(e.items())) for w, e in sorted(state.window_ends.items())}}
    for name in ACTOR_MAPS:   # absent while empty, as in checkpoints written before actors
        if len(getattr(state, name)):
            body[name] = by_id(name)
    return body


def kept(state: ServiceState, encoded: Any, chunk: int) -> Iterator[None]:
    """A pass bringing `encoded` (encoded.py) to what `state`'s snapshot
    holds per claim, `chunk` entries a step (Encoded.follow)."""
    return encoded.follow(state.kernel.claims, {name: getattr(state, name) for name in ("claim_seq", *ACTOR_MAPS)},
                          chunk)


def restore(body: dict[str, Any]) -> ServiceState:
    """The state a checkpoint's snapshot holds."""
    return ServiceState(checkpoint.restore(body["kernel"]), PMap(body["claim_seq"]), PMap(body["occupancy_seq"]),
                        *(PMap(body.get(name, {})) for name in ACTOR_MAPS),
                        PMap({w: dict(e) for w, e in body.get("window_ends", {}).items()}))


def compact(state: ServiceState) -> ServiceState:
    """What a checkpoint does to the state: drop the claims no accounting
    figure needs any more (checkpoint.compacted), and their receipt seqs."""
    kernel = checkpoint.compacted(state.kernel)
    if kernel.claims is state.kernel.claims:
        return state._replace(kernel=kernel)
    claim_seq = state.claim_seq
    for claim_id in state.kernel.claims.keys() - kernel.claims.keys():
        claim_seq = claim_seq.discard(claim_id)
    return state._replace(kernel=kernel, claim_seq=claim_seq)
