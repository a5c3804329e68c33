"""Each tenant's admitted claims by priority, for RULES §6's "a claim that
outranks them within its own tenant": the lowest priority a tenant holds and
its claims below a priority, found without walking every claim the tenant
holds (one tenant may hold tens of thousands, and the queue asks on every
decision whose cheap checks fail).

`ClusterState.admitted_by_tenant` is tenant -> SortedSeq of (priority, claim
id) of its admitted claims, kept by `apply` and recomputed by `rebuild`
(`rebuild(state) == state` holds it). The plain twins below walk the claims
themselves; tests/kernel/test_invariants.py holds the two equal on random runs.
"""

from __future__ import annotations

from collections.abc import Hashable

from .members import ADMITTED
from .pmap import PMap
from .sortedseq import SortedSeq

NONE = SortedSeq()   # a tenant's first admitted claim starts from this (sequences are immutable)


def ranked(ranks: PMap, tenant: str, priority: int, claim_id: Hashable, present: bool) -> PMap:
    """`ranks` (admitted_by_tenant) with the claim added (present) or removed."""
    old = ranks.get(tenant, NONE)
    new = old.add((priority, claim_id)) if present else old.remove((priority, claim_id))
    if not new:
        return ranks.delete(tenant)
    return ranks if new is old else ranks.set(tenant, new)


def lowest(ranks: PMap, tenant: str) -> int | None:
    """The lowest priority among the tenant's admitted claims; None when it has none."""
    held = ranks.get(tenant)
    return held.first()[0] if held else None


def below(ranks: PMap, tenant: str, priority: int) -> list:
    """The ids of the tenant's admitted claims of priority below `priority`,
    lowest first: only those are read."""
    out = []
    for rank, claim_id in ranks.get(tenant, NONE):
        if rank >= priority:
            break
        out.append(claim_id)
    return out


def lowest_plain(claims: PMap, tenant: str) -> int | None:
    """The plain twin of `lowest`: every admitted claim of the tenant looked at."""
    return min((c.spec.priority for c in claims.values() if c.tenant == tenant and c.state is ADMITTED), default=None)


def below_plain(claims: PMap, tenant: str, priority: int) -> list:
    """The plain twin of `below`."""
    return [c for _, c in sorted((c.spec.priority, c.claim_id) for c in claims.values()
                                 if c.tenant == tenant and c.state is ADMITTED and c.spec.priority < priority)]
