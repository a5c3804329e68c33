"""The one state transition: `apply(state, event) -> state`, pure. It keeps
the derived indexes (usage roll-ups, worker loads, the free index, gangs,
admitted claims per tenant) up to date incrementally; `rebuild` recomputes
them from the claims and is what a config change or a new period uses.
`Batch` applies a run of events as one edit batch (fast/edit.py).

An event that cannot apply (unknown claim, wrong state) raises EventError: a
ledger that contains one is corrupt, and the decision functions never make one.

(Over 300 lines on purpose: one handler per event kind beside `rebuild`,
the plain recomputation every handler must agree with, in one file.)
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import replace

from protos.energy import Grade, sum_graded

from .events import (ClaimAdmitted, ClaimBound, ClaimRefused, ClaimSubmitted, ConfigApplied, Event, Metered,
                     PeriodRolled, Preempted, Progress, Reclaimed, Released, Settled, WorkerCordoned,
                     WorkerLiveness, WorkerRegistered)
from .loads import WorkerLoad, adjust, device_used, free_key, load_of
from .fast.edit import OPEN, Edit
from .fast.pmap import PMap
from .reasons import ClaimState
from .rollup import bump, rollup
from .fast.freeindex import FreeIndex
from .snapshot import Claim, ClassStats, ClusterState, DeviceShare, Worker
from .fast.sortedseq import SortedSeq
from .fast.shapes import index as shape_index, pending_key, with_claim
from .fast.ranks import ranked
from .tree import load_tree
from .fast.members import ADMITTED, PENDING



class EventError(ValueError):
    pass




def _claim(state: ClusterState, claim_id: str, *states: ClaimState) -> Claim:
    claim = state.claims.get(claim_id)
    if claim is None:
        raise EventError(f"unknown claim {claim_id!r}")
    if states and claim.state not in states:
        raise EventError(f"claim {claim_id!r} is {claim.state.name}, expected {'/'.join(s.name for s in states)}")
    return claim


def _without_pending(state: ClusterState, claim: Claim) -> dict:
    gangs = state.gangs
    gang = claim.spec.gang_id
    if gang:
        members = tuple(m for m in gangs[gang] if m != claim.claim_id)
        gangs = gangs.set(gang, members) if members else gangs.delete(gang)
    key = pending_key(claim)
    return {"pending": state.pending.remove(key), "gangs": gangs,
            "shapes": with_claim(state.shapes, claim, key, False)}


def _reserved(state: ClusterState, worker: Worker, claim: Claim, devices: tuple[DeviceShare, ...], sign: int) -> dict:
    """Loads and free index with the claim's reservation on `worker` added
    (sign 1) or removed (-1): each map read once, as this runs on every
    admission and settlement."""
    old = state.loads[worker.worker_id]
    load = adjust(worker, old, claim.claim_id, claim.spec, devices, sign)
    keys = (free_key(worker, old), free_key(worker, load)) if worker.placeable else (None, None)
    return {"loads": state.loads.set(worker.worker_id, load), "free_index": state.free_index.replace(*keys)}


def _config(state: ClusterState, e: ConfigApplied) -> ClusterState:
    tree = load_tree(e.tenants)
    for claim in state.claims.values():
        if claim.state in (PENDING, ADMITTED) and claim.tenant not in tree.nodes:
            raise EventError(f"claim {claim.claim_id!r} is open under tenant {claim.tenant!r}, which the config drops")
    classes = PMap({c.name: c for c in e.classes})
    return rebuild(state._replace(tree=tree, period_ns=e.period_ns, epoch_ns=e.epoch_ns, classes=classes,
                           idle=e.idle, config_digest=e.digest))


def _registered(state: ClusterState, e: WorkerRegistered) -> ClusterState:
    old = state.workers.get(e.worker.worker_id)
    # a cordon is the operator's, not the agent's: a re-registration keeps it
    return _worker_changed(state, replace(e.worker, cordoned=old is not None and old.cordoned), old)


def _worker_changed(state: ClusterState, worker: Worker, old: Worker | None) -> ClusterState:
    worker = replace(worker, devices=tuple(sorted(worker.devices, key=lambda d: d.device_id)))
    old_key = free_key(old, state.loads[old.worker_id]) if old is not None and old.placeable else None
    if old is None:
        load = WorkerLoad(device_used=(0,) * len(worker.devices))
    else:   # the same open claims: only what they hold of each device can change, with the devices
        load = state.loads[worker.worker_id]
        if worker.devices != old.devices:
            load = load._replace(device_used=device_used(worker, (state.claims[c] for c in load.active)))
    index = state.free_index.replace(old_key, free_key(worker, load) if worker.placeable else None)
    ids = state.worker_ids
    if old is None:
        at = bisect_left(ids, worker.worker_id)
        ids = (*ids[:at], worker.worker_id, *ids[at:])
    return state._replace(workers=state.workers.set(worker.worker_id, worker),
                   loads=state.loads.set(worker.worker_id, load), free_index=index, worker_ids=ids)


def _known_worker(state: ClusterState, worker_id: str) -> Worker:
    old = state.workers.get(worker_id)
    if old is None:
        raise EventError(f"unknown worker {worker_id!r}")
    return old


def _liveness(state: ClusterState, e: WorkerLiveness) -> ClusterState:
    old = _known_worker(state, e.worker_id)
    return _worker_changed(state, replace(old, live=e.live), old)


def _cordoned(state: ClusterState, e: WorkerCordoned) -> ClusterState:
    old = _known_worker(state, e.worker_id)
    return _worker_changed(state, replace(old, cordoned=e.cordoned), old)


def _submitted(state: ClusterState, e: ClaimSubmitted) -> ClusterState:
    if e.spec.claim_id in state.claims:
        raise EventError(f"claim {e.spec.claim_id!r} submitted twice")
    claim = Claim(e.spec, e.seq, submitted_ns=e.at_ns)
    key = pending_key(claim)
    gangs = state.gangs
    if e.spec.gang_id:
        gangs = gangs.set(e.spec.gang_id, tuple(sorted((*gangs.get(e.spec.gang_id, ()), claim.claim_id))))
    return state._replace(claims=state.claims.set(claim.claim_id, claim),
                          pending=state.pending.add(key), gangs=gangs,
                          shapes=with_claim(state.shapes, claim, key, True),
                          next_seq=max(state.next_seq, e.seq + 1))


def _admitted(state: ClusterState, e: ClaimAdmitted) -> ClusterState:
    claim = _claim(state, e.claim_id, PENDING)
    worker = state.workers.get(e.worker)
    if worker is None:
        raise EventError(f"claim {e.claim_id!r} admitted on unknown worker {e.worker!r}")
    admitted = claim._replace(state=ADMITTED, hold_uj=e.hold_uj, hold_grade=e.hold_grade,
                       worker=e.worker, devices=e.devices, borrowed=e.borrowed, admitted_seq=e.admitted_seq,
                       admitted_ns=e.at_ns, borrowed_uj=e.borrowed_uj)
    return state._replace(claims=state.claims.set(claim.claim_id, admitted),
                   usage=bump(state.tree, state.usage, claim.tenant, admitted.usage_uj, claim.spec.resources.gpu_mdev),
                   admitted_by_tenant=ranked(state.admitted_by_tenant, claim.tenant, claim.spec.priority,
                                             claim.claim_id, True),
                   borrowed=state.borrowed.set(claim.claim_id, True) if e.borrowed else state.borrowed,
                   next_admit_seq=max(state.next_admit_seq, e.admitted_seq + 1),
                   **_without_pending(state, claim), **_reserved(state, worker, claim, e.devices, 1))


def _refused(state: ClusterState, e: ClaimRefused) -> ClusterState:
    claim = _claim(state, e.claim_id, PENDING)
    refused = claim._replace(state=ClaimState.REFUSED, reason=e.reason, settled_ns=e.at_ns)
    return state._replace(claims=state.claims.set(claim.claim_id, refused),
                          **_without_pending(state, claim))


def counted(state: ClusterState, worker_id: str) -> int:
    """The highest window seq counted for a host (0: none yet)."""
    return state.acked.get(worker_id, 0)


def fresh(state: ClusterState, worker_id: str, window_seq: int) -> bool:
    """A window is counted once: one at or below the host's counted seq is a
    resend and changes nothing. The one statement of the rule: the metering
    transition below, and the service's evidence door and windows fold
    (through `counted`, a batch at a time), all ask it."""
    return window_seq > counted(state, worker_id)


def _metered(state: ClusterState, e: Metered) -> ClusterState:
    if not fresh(state, e.worker_id, e.window_seq):
        return state  # a resend: already counted
    claims, usage = state.claims, state.usage
    for delta in e.deltas:
        claim = claims.get(delta.claim_id)
        if claim is None or claim.state is not ADMITTED:
            continue  # energy after settling is the host's, not the claim's
        uj, grade = sum_graded(((claim.measured_uj, claim.measured_grade), (delta.uj, delta.grade)))
        new = claim._replace(measured_uj=uj, measured_grade=grade)
        claims = claims.set(claim.claim_id, new)
        usage = bump(state.tree, usage, claim.tenant, new.usage_uj - claim.usage_uj, 0)
    return state._replace(claims=claims, usage=usage, acked=state.acked.set(e.worker_id, e.window_seq))


def _progress(state: ClusterState, e: Progress) -> ClusterState:
    claim = _claim(state, e.claim_id, PENDING, ADMITTED)
    if e.completed_units < claim.completed_units:
        raise EventError(f"claim {e.claim_id!r}: completed units went back from {claim.completed_units}")
    progressed = claim._replace(completed_units=e.completed_units)
    return state._replace(claims=state.claims.set(claim.claim_id, progressed))


_SETTLED_STATE = {Released: ClaimState.RELEASED, Preempted: ClaimState.PREEMPTED, Reclaimed: ClaimState.RECLAIMED}


def _observe(state: ClusterState, claim: Claim, e: Settled) -> PMap:
    """RULES §7: a released claim that was measured is an observation of its class."""
    name = claim.spec.work_class
    if type(e) is not Released or not name or claim.measured_grade is None:
        return state.class_stats
    stats = state.class_stats.get(name, ClassStats())
    if claim.measured_grade is Grade.Estimator:
        stats = replace(stats, observations=stats.observations + 1, excluded_estimator=stats.excluded_estimator + 1)
    else:
        stats = replace(stats, observations=stats.observations + 1, eligible=stats.eligible + 1,
                        max_uj=max(stats.max_uj, e.actual_uj))
    return state.class_stats.set(name, stats)


def _settled(state: ClusterState, e: Settled) -> ClusterState:
    open_states = (PENDING, ADMITTED) if type(e) is Released else (ADMITTED,)
    claim = _claim(state, e.claim_id, *open_states)
    settled = claim._replace(state=_SETTLED_STATE[type(e)], completed_units=max(claim.completed_units, e.completed_units),
                      settled_ns=e.at_ns, settled_uj=e.actual_uj, settled_grade=e.actual_grade)
    if claim.state is PENDING:
        return state._replace(claims=state.claims.set(claim.claim_id, settled),
                              **_without_pending(state, claim))
    usage = bump(state.tree, state.usage, claim.tenant, e.actual_uj - claim.usage_uj, -claim.spec.resources.gpu_mdev)
    return state._replace(claims=state.claims.set(claim.claim_id, settled), usage=usage,
                   admitted_by_tenant=ranked(state.admitted_by_tenant, claim.tenant, claim.spec.priority,
                                             claim.claim_id, False),
                   borrowed=state.borrowed.delete(claim.claim_id) if claim.borrowed else state.borrowed,
                   settled=state.settled.set(claim.claim_id, True), class_stats=_observe(state, claim, e),
                   **_reserved(state, state.workers[claim.worker], claim, claim.devices, -1))


def _bound(state: ClusterState, e: ClaimBound) -> ClusterState:
    """RULES §10 (binding.py decides; this moves the reservations as recorded)."""
    worker = _known_worker(state, e.worker_id)
    for b in e.bindings:
        claim = _claim(state, b.claim_id, ADMITTED)
        if claim.worker != e.worker_id:
            raise EventError(f"claim {b.claim_id!r} is on {claim.worker!r}, not {e.worker_id!r}")
        state = state._replace(**_reserved(state, worker, claim, claim.devices, -1))
        moved = claim._replace(devices=b.devices, bound=claim.bound or b.bound)
        state = state._replace(claims=state.claims.set(b.claim_id, moved), **_reserved(state, worker, moved, b.devices, 1))
    return state


def _rolled(state: ClusterState, e: PeriodRolled) -> ClusterState:
    if e.period_index <= state.period_index:
        raise EventError(f"period {e.period_index} does not follow {state.period_index}")
    return rebuild(state._replace(period_index=e.period_index, settled=PMap()))


_HANDLERS = {ConfigApplied: _config, WorkerRegistered: _registered, WorkerLiveness: _liveness,
             WorkerCordoned: _cordoned,
             ClaimSubmitted: _submitted, ClaimAdmitted: _admitted, ClaimRefused: _refused, Metered: _metered,
             Progress: _progress, Released: _settled, Preempted: _settled, Reclaimed: _settled,
             PeriodRolled: _rolled, ClaimBound: _bound}


def apply(state: ClusterState, event: Event) -> ClusterState:
    """The state after `event`. Inside an edit batch (edit.py) the persistent
    structures change in place what the batch made, and `state` is spent."""
    if state.tree is None and not isinstance(event, (ConfigApplied, WorkerRegistered, WorkerLiveness, WorkerCordoned)):
        raise EventError(f"{event.kind} before any configuration")
    return _HANDLERS[type(event)](state, event)


class Batch:
    """Events applied one after another as one edit batch (fast/edit.py):
    `state` is the last one's result, and the batch is open only while
    `apply` runs, so the states a caller derives in between (by evaluating,
    or by trying a preemption) copy as always. The states between two
    applies are spent; only the last is valid."""

    __slots__ = ("state", "edit")

    def __init__(self, state: ClusterState) -> None:
        self.state, self.edit = state, Edit()

    def apply(self, event: Event) -> ClusterState:
        token = OPEN.set(self.edit)   # open only while this event applies
        try:
            self.state = apply(self.state, event)
        finally:
            OPEN.reset(token)
        return self.state


def rebuild(state: ClusterState) -> ClusterState:
    """Every derived index recomputed from the claims: the reference that the
    incremental maintenance must equal, and a full-recompute path."""
    direct: dict[str, tuple[int, int]] = {}
    open_on: dict[str, list[Claim]] = {w: [] for w in state.workers}
    admitted_by_tenant: dict[str, list] = {}
    borrowed: dict[str, bool] = {}
    pending, gangs, waiting = [], {}, []
    for claim in state.claims.values():
        uj = mdev = 0
        if claim.state is ADMITTED:
            uj, mdev = claim.usage_uj, claim.spec.resources.gpu_mdev
            open_on[claim.worker].append(claim)
            admitted_by_tenant.setdefault(claim.tenant, []).append((claim.spec.priority, claim.claim_id))
            if claim.borrowed:
                borrowed[claim.claim_id] = True
        elif claim.claim_id in state.settled:
            uj = claim.settled_uj
        elif claim.state is PENDING:
            pending.append(pending_key(claim))
            waiting.append(claim)
            if claim.spec.gang_id:
                gangs.setdefault(claim.spec.gang_id, []).append(claim.claim_id)
        if uj or mdev:
            d_uj, d_mdev = direct.get(claim.tenant, (0, 0))
            direct[claim.tenant] = (d_uj + uj, d_mdev + mdev)
    loads = {w: load_of(state.workers[w], claims) for w, claims in open_on.items()}
    index = FreeIndex(free_key(state.workers[w], load) for w, load in loads.items() if state.workers[w].placeable)
    usage = rollup(state.tree, direct) if state.tree is not None else None
    return state._replace(usage=usage, loads=PMap(loads), free_index=index,
                   gangs=PMap({g: tuple(sorted(m)) for g, m in gangs.items()}),
                   admitted_by_tenant=PMap({t: SortedSeq(pairs) for t, pairs in admitted_by_tenant.items()}),
                   pending=SortedSeq(pending), borrowed=PMap(borrowed), worker_ids=tuple(sorted(state.workers)),
                   shapes=shape_index(waiting))
