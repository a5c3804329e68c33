"""RULES §3-§6 written as plainly as they can be: the reference the fast
kernel is tested against (tests/kernel/test_reference.py), kept beside the
tests: the service never imports it.

No speed tricks. Usage is summed from the claims on every call; workers are
scanned in a line; victims are sorted by a key read off the rulebook. It
reads only a state's primary records (the tree's nodes, claims, workers,
what settled this period), never the indexes `apply` maintains (roll-ups,
loads, the free index, the queue's shapes), and it carries its decisions
out through the kernel's own events and `apply`, so two states can be
compared whole. The hold (§7) is `admission.hold_for`, and what a claim
settles at is `admission.settle`: those are other sections' rules.

Where the rulebook leaves a choice this module makes the one docs/RULES.md
states, in the same order: a disagreement with the kernel is a bug in one
of the two.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import NamedTuple

from protos.energy import MDEV_PER_DEVICE, Grade, split

from scheduler.kernel.estimates import hold_for
from scheduler.kernel.requests import settle
from scheduler.kernel.fit import Fit  # the record, not the rule: the figures a check reports
from scheduler.kernel.events import ClaimAdmitted, ClaimRefused, Event, Preempted
from scheduler.kernel.reasons import ClaimState, Placement, Reason
from scheduler.kernel.snapshot import Claim, ClaimSpec, ClusterState, DeviceShare, Worker
from scheduler.kernel.transitions import apply
from scheduler.kernel.tree import DEVICES, ENERGY, TenantTree  # the dimensions' names, as the kernel's


# -- §3 usage -------------------------------------------------------------------

def claim_usage(state: ClusterState, claim: Claim) -> dict[str, int]:
    """What one claim counts in its tenant's usage: an open claim the larger
    of its hold and its measure, a claim settled this period its actual."""
    if claim.state is ClaimState.ADMITTED:
        return {ENERGY: max(claim.hold_uj, claim.measured_uj), DEVICES: claim.spec.resources.gpu_mdev}
    if claim.claim_id in state.settled:
        return {ENERGY: claim.settled_uj, DEVICES: 0}
    return {ENERGY: 0, DEVICES: 0}


class Usage(NamedTuple):
    """One node's usage in one dimension."""

    direct: int     # its own claims
    total: int      # its whole subtree
    within: int     # direct, plus each child's `within` up to that child's guarantee
    held_back: int  # guarantee its children may not lend (lend limit) and do not use


def guarantee(tree: TenantTree, name: str, dim: str) -> int:
    node = tree.nodes[name]
    return node.guarantee_uj if dim == ENERGY else node.guarantee_mdev


def lend_held(tree: TenantTree, name: str, total_uj: int) -> int:
    """Guarantee a node neither uses nor may lend."""
    lend_limit = tree.nodes[name].lend_limit_uj
    return 0 if lend_limit is None else max(0, guarantee(tree, name, ENERGY) - lend_limit - total_uj)


def usage(state: ClusterState, dim: str) -> dict[str, Usage]:
    """Every node's usage, summed from the claims."""
    direct = dict.fromkeys(state.tree.order, 0)
    for claim in state.claims.values():
        direct[claim.tenant] += claim_usage(state, claim)[dim]
    return rolled_up(state.tree, direct, dim)


def rolled_up(tree: TenantTree, direct: dict[str, int], dim: str) -> dict[str, Usage]:
    """Every node's usage from each node's direct usage, leaves up."""
    out: dict[str, Usage] = {}

    def node(name: str) -> Usage:
        names = tree.children[name]
        children = [node(child) for child in names]
        out[name] = Usage(
            direct[name],
            direct[name] + sum(u.total for u in children),
            direct[name] + sum(min(guarantee(tree, c, dim), u.within) for c, u in zip(names, children)),
            sum(lend_held(tree, c, u.total) for c, u in zip(names, children)) if dim == ENERGY else 0)
        return out[name]
    node(tree.root)
    return out


def own_pass(tree: TenantTree, used: dict[str, Usage], tenant: str, dim: str, amount: int) -> Fit:
    """Every node from the tenant up stays within its guarantee, counting
    what its subtree uses within guarantees, plus `amount`."""
    for name in tree.path(tenant):
        if used[name].within + amount > guarantee(tree, name, dim):
            return Fit(False, name, guarantee(tree, name, dim), used[name].within)
    return Fit(True, tenant, guarantee(tree, tenant, dim), used[tenant].within)


def borrower_share(tree: TenantTree, used: dict[str, Usage], parent: str, child: str, dim: str, amount: int,
                   pool: int) -> int:
    """`child`'s share of `pool` among the children of `parent` that go
    above their guarantee (the claim's `amount` counted at `child`): split by
    weight, largest remainder (protos.energy.split, as §2.5)."""
    borrowers = {k: tree.nodes[k].weight for k in tree.children[parent]
                 if used[k].total + (amount if k == child else 0) > guarantee(tree, k, dim)}
    if child not in borrowers or pool <= 0:
        return 0
    return next(share.uj for share in split(pool, borrowers, Grade.ModelBased) if share.occupant == child)


def within_allowance(tree: TenantTree, used: dict[str, Usage], tenant: str, dim: str, amount: int,
                     borrowing: bool) -> Fit:
    """Root down: every node on the path stays within its guarantee plus its
    allowance, the share of its parent's pool it may borrow. A borrowing
    claim also counts the guarantee other children hold back by lend limits.
    The first (topmost) node that would not, else ok at the tenant."""
    path = list(reversed(tree.path(tenant)))  # root first
    energy = dim == ENERGY

    def held_back(name: str, child: str | None) -> int:
        """Guarantee `name`'s children hold back, but the claimant's branch."""
        if not energy:
            return 0
        return used[name].held_back - (lend_held(tree, child, used[child].total) if child is not None else 0)

    allowance = 0
    for depth, name in enumerate(path):
        child = path[depth + 1] if depth + 1 < len(path) else None
        g, total = guarantee(tree, name, dim), used[name].total
        limit = tree.nodes[name].borrow_limit_uj if energy and depth > 0 else None
        if total + amount + (held_back(name, child) if borrowing else 0) - g > allowance:
            return Fit(False, name, g, total, allowance, limit)
        if child is None:
            return Fit(True, name, g, total, allowance, limit)
        child_held = held_back(child, None) if borrowing else 0
        if used[child].total + amount + child_held <= guarantee(tree, child, dim):
            allowance = 0  # the child stays within its guarantee: it needs no share
            continue
        within_children = sum(min(used[k].total + (amount if k == child else 0), guarantee(tree, k, dim))
                              for k in tree.children[name])
        pool = g + allowance - used[name].direct - within_children - held_back(name, child)
        allowance = borrower_share(tree, used, name, child, dim, amount, pool)
        child_limit = tree.nodes[child].borrow_limit_uj if energy else None
        if child_limit is not None:
            allowance = min(allowance, child_limit)
    raise AssertionError("a path ends at the root")


# -- §5 placement ---------------------------------------------------------------

class Load(NamedTuple):
    """What the admitted claims on one worker reserve."""

    cpu_millis: int
    memory_mb: int
    disk_mb: int
    device_used: dict[str, int]  # device id -> mdev
    active: int
    exclusive: int


def load(state: ClusterState, worker: Worker) -> Load:
    on_it = [c for c in state.claims.values() if c.state is ClaimState.ADMITTED and c.worker == worker.worker_id]
    used = {d.device_id: 0 for d in worker.devices}
    for claim in on_it:
        for share in claim.devices:
            if share.device_id in used:
                used[share.device_id] += share.mdev
    return Load(sum(c.spec.resources.cpu_millis for c in on_it), sum(c.spec.resources.memory_mb for c in on_it),
                sum(c.spec.resources.disk_mb for c in on_it), used, len(on_it),
                sum(c.spec.placement is Placement.PLACEMENT_EXCLUSIVE for c in on_it))


def devices_for(worker: Worker, taken: Load, spec: ClaimSpec) -> tuple[DeviceShare, ...] | None:
    """A fraction goes to the matching device with the least free mdev that
    fits (then the lowest id); whole GPUs to the lowest-id wholly free
    matching devices. None when the request cannot be met."""
    req = spec.resources
    if not req.gpu_mdev:
        return ()
    matching = sorted((d for d in worker.devices if not req.gpu_types or d.device_type in req.gpu_types),
                      key=lambda d: d.device_id)
    free = {d.device_id: MDEV_PER_DEVICE - taken.device_used[d.device_id] for d in matching}
    if req.gpu_mdev < MDEV_PER_DEVICE:
        fitting = [d for d in matching if free[d.device_id] >= req.gpu_mdev]
        if not fitting:
            return None
        best = min(fitting, key=lambda d: (free[d.device_id], d.device_id))
        return (DeviceShare(best.device_id, req.gpu_mdev),)
    whole = [d for d in matching if free[d.device_id] == MDEV_PER_DEVICE]
    wanted = req.gpu_mdev // MDEV_PER_DEVICE
    if len(whole) < wanted:
        return None
    return tuple(DeviceShare(d.device_id, MDEV_PER_DEVICE) for d in whole[:wanted])


def worker_reason(worker: Worker, taken: Load, spec: ClaimSpec) -> Reason:
    """The first check the worker fails, in RULES §5's order, or ADMISSIBLE."""
    req = spec.resources
    if not worker.live or not set(req.gpu_types) <= {d.device_type for d in worker.devices}:
        return Reason.WORKER_INELIGIBLE
    if worker.cordoned:
        return Reason.WORKER_CORDONED
    if spec.placement is Placement.PLACEMENT_EXCLUSIVE and taken.active:
        return Reason.EXCLUSIVE_WORKER_BUSY
    if taken.exclusive:
        return Reason.WORKER_HAS_EXCLUSIVE_TASK
    if (taken.cpu_millis + req.cpu_millis > worker.cpu_millis or taken.memory_mb + req.memory_mb > worker.memory_mb
            or taken.disk_mb + req.disk_mb > worker.disk_mb or devices_for(worker, taken, spec) is None):
        return Reason.RESOURCE_RESERVATION_UNAVAILABLE
    if worker.max_concurrency and taken.active >= worker.max_concurrency:
        return Reason.WORKER_CONCURRENCY_REACHED
    return Reason.ADMISSIBLE


def best_fit(state: ClusterState, spec: ClaimSpec) -> tuple[str, tuple[DeviceShare, ...]] | None:
    """Every worker that takes the claim, the one with the fewest free mdev,
    then free cpu, memory, disk, then the smallest id."""
    passing = []
    for worker in state.workers.values():
        taken = load(state, worker)
        if worker_reason(worker, taken, spec) is Reason.ADMISSIBLE:
            free = (MDEV_PER_DEVICE * len(worker.devices) - sum(taken.device_used.values()),
                    worker.cpu_millis - taken.cpu_millis, worker.memory_mb - taken.memory_mb,
                    worker.disk_mb - taken.disk_mb, worker.worker_id)
            passing.append((free, worker, taken))
    if not passing:
        return None
    _, worker, taken = min(passing, key=lambda p: p[0])
    return worker.worker_id, devices_for(worker, taken, spec)


# -- §6 preemption ----------------------------------------------------------------

def measured(claim: Claim) -> bool:
    return claim.completed_units > 0 and claim.measured_grade is not None and claim.measured_grade < Grade.Estimator


def preemption_key(claim: Claim) -> tuple:
    """Worst first: measured claims by µJ per completed unit, highest first,
    then unmeasured ones; ties by lower priority, most recently admitted, id."""
    per_unit = -Fraction(claim.measured_uj, claim.completed_units) if measured(claim) else Fraction(0)
    return (0 if measured(claim) else 1, per_unit, claim.spec.priority, -claim.admitted_seq, claim.claim_id)


def admitted(state: ClusterState) -> list[Claim]:
    return [c for c in state.claims.values() if c.state is ClaimState.ADMITTED]


def lent_candidates(state: ClusterState, claim: Claim) -> list[Claim]:
    """For taking back lent capacity: borrowed claims of other tenants, or of
    lower priority in the claim's own tenant."""
    return sorted((c for c in admitted(state) if c.borrowed and (
        c.tenant != claim.tenant or c.spec.priority < claim.spec.priority)), key=preemption_key)


def outranked_candidates(state: ClusterState, claim: Claim) -> list[Claim]:
    """For a claim that outranks them: its own tenant's claims of lower priority."""
    return sorted((c for c in admitted(state) if c.tenant == claim.tenant and c.spec.priority < claim.spec.priority),
                  key=preemption_key)


class Blocker(NamedTuple):
    check: str
    dim: str
    node: str
    usage: int


def own_blocker(state: ClusterState, tenant: str, hold_uj: int, mdev: int) -> Blocker | None:
    """What keeps an own-pass admission out: the own pass, then the
    allowances without borrowing; energy, then devices; the first failure."""
    for check in ("own_pass", "within_allowance"):
        for dim, amount in ((ENERGY, hold_uj), (DEVICES, mdev)):
            used = usage(state, dim)
            fit = own_pass(state.tree, used, tenant, dim, amount) if check == "own_pass" else within_allowance(
                state.tree, used, tenant, dim, amount, False)
            if not fit.ok:
                return Blocker(check, dim, fit.node, fit.usage)
    return None


def preempted(state: ClusterState, victim: Claim, claim: Claim, now_ns: int) -> ClusterState:
    return apply(state, settle(state, victim.claim_id, now_ns, Preempted, by_claim=claim.claim_id))


def victims_for(state: ClusterState, claim: Claim, hold_uj: int, candidates: list[Claim], blocked: Blocker | None,
                now_ns: int) -> tuple[list[Claim], ClusterState] | None:
    """Candidates in order, each taken only if it sits under the node that
    still blocks and removing it frees some of what blocks there, until
    nothing blocks; None when they cannot suffice."""
    start, taken = state, []
    mdev = claim.spec.resources.gpu_mdev
    for candidate in candidates:
        if blocked is None:
            break
        if blocked.node not in state.tree.path(candidate.tenant):
            continue
        after = preempted(state, candidate, claim, now_ns)
        now = own_blocker(after, claim.tenant, hold_uj, mdev)
        if now is None or now[:3] != blocked[:3] or now.usage < blocked.usage:
            taken.append(candidate)
            state, blocked = after, now
    if blocked is not None:
        return None
    # then any victim the others make unnecessary is spared, the last taken first
    for victim in reversed(list(taken)):
        rest = [v for v in taken if v is not victim]
        if own_blocker(without(start, rest, claim, now_ns), claim.tenant, hold_uj, mdev) is None:
            taken = rest
    return taken, without(start, taken, claim, now_ns)


def without(state: ClusterState, victims: list[Claim], claim: Claim, now_ns: int) -> ClusterState:
    for victim in victims:
        state = preempted(state, victim, claim, now_ns)
    return state


# -- §3 one claim ------------------------------------------------------------------

class Verdict(NamedTuple):
    reason: Reason
    hold_uj: int = 0
    hold_grade: Grade | None = None
    borrowed: bool = False
    victims: tuple[str, ...] = ()
    worker: str = ""
    devices: tuple[DeviceShare, ...] = ()


def judge(state: ClusterState, claim: Claim, may_preempt: bool = True) -> Verdict:
    """RULES §3's checks in order, the first failure the reason: validate →
    devices → energy own pass (taking lent capacity back) → not Estimator →
    energy surplus → placement (on the state the victims leave)."""
    hold = hold_for(state, claim.spec) if claim.tenant in state.tree.nodes else None
    if not isinstance(hold, tuple):
        return Verdict(Reason.INVALID)
    hold_uj, grade = hold
    mdev = claim.spec.resources.gpu_mdev

    tree, energy, devices = state.tree, usage(state, ENERGY), usage(state, DEVICES)
    own_devices = own_pass(tree, devices, claim.tenant, DEVICES, mdev)
    if not own_devices.ok and not within_allowance(tree, devices, claim.tenant, DEVICES, mdev, True).ok:
        return Verdict(Reason.DEVICES_ENTITLEMENT, hold_uj, grade)
    own_energy = own_pass(tree, energy, claim.tenant, ENERGY, hold_uj)
    borrowing = not (own_energy.ok and own_devices.ok)
    victims: list[Claim] = []
    if not borrowing:
        # within its own guarantee: what is lent is taken back
        blocked = own_blocker(state, claim.tenant, hold_uj, mdev)
        if blocked is not None:
            found = victims_for(state, claim, hold_uj, lent_candidates(state, claim) if may_preempt else [],
                                blocked, 0)
            if found is None:
                return Verdict(Reason.ENERGY_OWN_PASS, hold_uj, grade)
            victims = found[0]
    else:
        if grade is Grade.Estimator:
            failure = Reason.ESTIMATOR_MAY_NOT_BORROW  # tested before any surplus is computed
        elif not within_allowance(tree, energy, claim.tenant, ENERGY, hold_uj, True).ok:
            failure = Reason.ENERGY_SURPLUS
        else:
            failure = None
        if failure is not None:
            # it cannot borrow: claims it outranks in its tenant may make room in its own guarantee
            failing = own_energy if not own_energy.ok else own_devices
            blocked = Blocker("own_pass", ENERGY if failing is own_energy else DEVICES, failing.node, failing.usage)
            found = victims_for(state, claim, hold_uj, outranked_candidates(state, claim) if may_preempt else [],
                                blocked, 0)
            if found is None:
                return Verdict(failure, hold_uj, grade)
            victims, borrowing = found[0], False
    placed = best_fit(without(state, victims, claim, 0), claim.spec)
    if placed is None:
        return Verdict(Reason.NO_ELIGIBLE_WORKER, hold_uj, grade)
    return Verdict(Reason.ADMISSIBLE, hold_uj, grade, borrowing, tuple(v.claim_id for v in victims), *placed)


def admission(state: ClusterState, claim: Claim, verdict: Verdict, now_ns: int) -> list[Event]:
    """The victims preempted, then the claim admitted."""
    events: list[Event] = []
    for victim_id in verdict.victims:
        event = settle(state, victim_id, now_ns, Preempted, by_claim=claim.claim_id)
        events.append(event)
        state = apply(state, event)
    events.append(ClaimAdmitted(claim.claim_id, verdict.hold_uj, verdict.hold_grade, verdict.worker, verdict.devices,
                                verdict.borrowed, max([0, *(c.admitted_seq for c in state.claims.values())]) + 1,
                                now_ns, borrowed_uj(state, claim, verdict)))
    return events


def borrowed_uj(state: ClusterState, claim: Claim, verdict: Verdict) -> int:
    """What a borrowing admission borrows: the part of its hold beyond what
    its tenant's own guarantee has free."""
    if not verdict.borrowed:
        return 0
    free = max(0, guarantee(state.tree, claim.tenant, ENERGY) - usage(state, ENERGY)[claim.tenant].total)
    return max(0, verdict.hold_uj - free)


# -- §4 gangs ----------------------------------------------------------------------

def gang_never_fits(state: ClusterState, members: list[Claim]) -> bool:
    """A necessary condition fails for the members present: energy or devices
    above the root's guarantee, a member no empty worker could take, more
    exclusive members than workers, more members than the workers'
    concurrency, a resource total above the cluster's."""
    root = state.tree.nodes[state.tree.root]
    holds = [hold_for(state, m.spec) for m in members]
    if sum(h[0] for h in holds if isinstance(h, tuple)) > root.guarantee_uj:
        return True
    if sum(m.spec.resources.gpu_mdev for m in members) > root.guarantee_mdev:
        return True
    workers = list(state.workers.values())
    for member in members:
        if not any(worker_reason(replace(w, live=True, cordoned=False), Load(0, 0, 0, {d.device_id: 0 for d in w.devices}, 0, 0),
                                 member.spec) is Reason.ADMISSIBLE for w in workers):
            return True
    if sum(m.spec.placement is Placement.PLACEMENT_EXCLUSIVE for m in members) > len(workers):
        return True
    if all(w.max_concurrency for w in workers) and len(members) > sum(w.max_concurrency for w in workers):
        return True
    for field in ("cpu_millis", "memory_mb", "disk_mb"):
        if sum(getattr(m.spec.resources, field) for m in members) > sum(getattr(w, field) for w in workers):
            return True
    return sum(m.spec.resources.gpu_mdev for m in members) > sum(MDEV_PER_DEVICE * len(w.devices) for w in workers)


def gang_admission(state: ClusterState, members: list[Claim], now_ns: int) -> tuple[Reason, list[Event]]:
    """Members in submission order, each judged on the state holding the
    ones before it, none preempting: all admitted, or none."""
    events: list[Event] = []
    for member in members:
        verdict = judge(state, state.claims[member.claim_id], may_preempt=False)
        if verdict.reason is not Reason.ADMISSIBLE:
            return verdict.reason, []
        for event in admission(state, member, verdict, now_ns):
            events.append(event)
            state = apply(state, event)
    return Reason.ADMISSIBLE, events


# -- §3 the queue ------------------------------------------------------------------

class Outcome(NamedTuple):
    events: list[Event]
    reasons: dict[str, Reason]  # each claim judged, its last verdict
    state: ClusterState


def queue(state: ClusterState) -> list[Claim]:
    """Pending claims, priority descending, then submission sequence."""
    return sorted((c for c in state.claims.values() if c.state is ClaimState.PENDING),
                  key=lambda c: (-c.spec.priority, c.seq))


def rejudge(state: ClusterState, now_ns: int) -> Outcome:
    """Every pending claim in queue order, a gang at its first member's place,
    each judged on the state the ones before it left; again while a pass
    preempts. (A new period is the caller's: schedule.period_roll.)"""
    events: list[Event] = []
    reasons: dict[str, Reason] = {}
    while True:
        preempting = False
        decided_gangs: set[str] = set()
        for claim in queue(state):
            if state.claims[claim.claim_id].state is not ClaimState.PENDING:
                continue
            gang_id = claim.spec.gang_id
            if gang_id in decided_gangs:
                continue
            if gang_id:
                decided_gangs.add(gang_id)
                members = sorted((c for c in state.claims.values()
                                  if c.spec.gang_id == gang_id and c.state is ClaimState.PENDING), key=lambda c: c.seq)
                if gang_never_fits(state, members):
                    reason, new = Reason.GANG_NEVER_FITS, [ClaimRefused(m.claim_id, Reason.GANG_NEVER_FITS, now_ns)
                                                           for m in members]
                elif len(members) < claim.spec.gang_size:
                    reason, new = Reason.GANG_INCOMPLETE, []
                else:
                    reason, new = gang_admission(state, members, now_ns)
                reasons.update((m.claim_id, reason) for m in members)
            else:
                verdict = judge(state, claim)
                reasons[claim.claim_id] = verdict.reason
                new = admission(state, claim, verdict, now_ns) if verdict.reason is Reason.ADMISSIBLE else []
            for event in new:
                preempting |= isinstance(event, Preempted)
                events.append(event)
                state = apply(state, event)
        if not preempting:
            return Outcome(events, reasons, state)
