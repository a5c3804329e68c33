"""Names per tenant (docs/RULES.md §names): a claim is named by its tenant and
its id, a gang by its tenant and its gang id, so two tenants may each have
claim `job-1` and gang `train-42` at once.

The one home of the rule. The kernel keys a claim by an opaque text, its
*key*: `TENANT/ID` (an id never holds a '/', so the key splits at its last
one), which is also what the ledger's receipts record. A ledger written before
names were per tenant keys its claims by the bare id (ids were unique across
tenants then); those keys are kept as they are, so an old ledger replays to
the same state, and every lookup here finds them too.

At the edge the service turns what a client names into a key (`spec`,
`resolve`) and a key back into what a client sees (`bare`: the id, with the
tenant beside it in every answer)."""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.kernel import ClaimSpec, ClusterState
from scheduler.kernel.limits import name_error
from scheduler.service.errors import Refused
from scheduler.service.principal import Principal, in_reach

SEPARATOR = "/"


def key(tenant: str, name: str) -> str:
    """The key of a tenant's claim or gang named `name`."""
    return f"{tenant}{SEPARATOR}{name}"


def bare(key_: str) -> str:
    """What a client calls the claim or gang keyed `key_`: its id (a key of an
    older ledger is the id already)."""
    return key_.rpartition(SEPARATOR)[2]


def spec(state: ClusterState, given: ClaimSpec) -> ClaimSpec:
    """A submission as the kernel takes it: its claim and gang ids keyed by
    its tenant (an id that is not a valid id stays one inside its key: the
    kernel's INVALID_CLAIM says why); an id an older ledger's claim, or
    waiting gang, of the same tenant holds bare keeps that key, so a
    resubmission still meets its claim."""
    claim_id, gang_id, tenant = given.claim_id, given.gang_id, given.tenant
    valid = name_error(claim_id) is None
    claim_id = (valid and _legacy(state, tenant, claim_id)) or key(tenant, claim_id)
    if gang_id:
        valid = name_error(gang_id) is None
        gang_id = gang_id if valid and _legacy_gang(state, tenant, gang_id) else key(tenant, gang_id)
    return ClaimSpec(claim_id=claim_id, tenant=given.tenant, resources=given.resources,
                     placement=given.placement, estimate_uj=given.estimate_uj, work_class=given.work_class,
                     priority=given.priority, gang_id=gang_id, gang_size=given.gang_size)


def _legacy(state: ClusterState, tenant: str, claim_id: str) -> str | None:
    """`claim_id`, when an older ledger's claim of `tenant` is keyed by it bare."""
    claim = state.claims.get(claim_id)
    return claim_id if claim is not None and claim.tenant == tenant else None


def _legacy_gang(state: ClusterState, tenant: str, gang_id: str) -> bool:
    """An older ledger's gang of `tenant`, keyed bare, still waiting for members."""
    members = state.gangs.get(gang_id, ())
    return any(state.claims[m].tenant == tenant for m in members)


def resolve(state: ClusterState, claim_id: str, tenant: str, principal: Principal) -> str:
    """The key of the claim a request names: `claim_id` (an ID, or TENANT/ID)
    and the request's optional `tenant`, looked for among the claims
    `principal` may reach (a tenant: its subtrees; anyone else: all). None
    there: UNKNOWN_CLAIM, worded as for an id nobody has, so that a tenant
    cannot learn which ids others use; several: AMBIGUOUS_CLAIM."""
    name = claim_id
    if SEPARATOR in claim_id:
        written, _, name = claim_id.rpartition(SEPARATOR)
        if tenant and tenant != written:
            raise Refused("INVALID_ARGUMENT", f"claim_id {claim_id!r} names tenant {written!r}, "
                                              f"tenant names {tenant!r}")
        tenant = written
    unknown = Refused("UNKNOWN_CLAIM", f"no claim {claim_id!r}")
    if tenant:
        if not _reaches(principal, state, tenant):
            raise unknown
        found = _keys(state, (tenant,), name)
    else:
        found = _keys(state, _reach(principal, state), name)
    if not found:
        raise unknown
    if len(found) > 1:
        tenants = ", ".join(sorted(state.claims[k].tenant for k in found))
        raise Refused("AMBIGUOUS_CLAIM", f"claim id {name!r} is used by tenants {tenants}: name the tenant "
                                         f"(the request's tenant field, or {key('TENANT', name)})")
    return found[0]


def _keys(state: ClusterState, tenants: Iterable[str], name: str) -> list[str]:
    """The keys of the claims named `name` of `tenants`, an older ledger's included."""
    tenants = tuple(tenants)
    found = [k for t in tenants if (k := key(t, name)) in state.claims]
    legacy = state.claims.get(name)
    if legacy is not None and legacy.tenant in tenants:
        found.append(name)
    return found


def _reach(principal: Principal, state: ClusterState) -> Iterable[str]:
    """The tenants whose claims `principal` may name: a tenant's subtrees, else
    every node of the tree."""
    tree = state.tree
    if tree is None:
        return ()
    if principal.role != "tenant":
        return tree.nodes
    return (n for n in tree.nodes if in_reach(principal, state, n))


def _reaches(principal: Principal, state: ClusterState, tenant: str) -> bool:
    return principal.role != "tenant" or in_reach(principal, state, tenant)
