"""Names per tenant (docs/RULES.md §names, scheduler/service/names.py), below
gRPC: what a tenant's requests do does not depend on another tenant using the
same claim and gang ids. The e2e twin: tests/e2e/test_names.py."""

from __future__ import annotations

from functools import reduce

import pytest
from hypothesis import given, settings, strategies as st

from scheduler import kernel
from scheduler.kernel import ClaimSpec, ConfigApplied, Device, Resources, Tenant, Worker, WorkerRegistered
from scheduler.service import names
from scheduler.service.errors import Refused
from scheduler.service.principal import Principal

TENANTS = (Tenant("root", guarantee_uj=10**12, guarantee_mdev=8000),
           Tenant("a", "root", guarantee_uj=10**11, guarantee_mdev=4000),
           Tenant("b", "root", guarantee_uj=10**11, guarantee_mdev=4000))
WORKER = Worker("w1", 64_000, 1 << 20, 1 << 20, tuple(Device(f"w1-gpu{i}", "H200") for i in range(8)))
PRINCIPALS = {t: Principal(t, "tenant", (t,)) for t in ("a", "b")}
OPERATOR = Principal("op", "operator")

IDS = st.sampled_from(["job-1", "job-2", "train-42"])
OPS = st.lists(st.tuples(st.sampled_from(["a", "b"]),
                         st.sampled_from(["submit", "release", "progress", "admit"]),
                         IDS,
                         st.sampled_from(["", "train-42", "g"]),   # gang id
                         st.integers(1, 3)),                         # estimate / units / gang size
               max_size=30)


def start() -> kernel.ClusterState:
    return reduce(kernel.apply, [ConfigApplied(TENANTS), WorkerRegistered(WORKER)], kernel.ClusterState())


def step(state: kernel.ClusterState, op: tuple, now: int) -> tuple[kernel.ClusterState, str]:
    """One request as the service makes it of the kernel: names at the edge,
    then the kernel. Answers the state after it and what the tenant is told."""
    tenant, action, claim_id, gang, n = op
    try:
        if action == "submit":
            spec = ClaimSpec(claim_id, tenant, Resources(cpu_millis=100), estimate_uj=n * 1000,
                             gang_id=gang, gang_size=2 if gang else 0)
            answer = kernel.submit(state, names.spec(state, spec), now)
        else:
            key = names.resolve(state, claim_id, "", PRINCIPALS[tenant])
            if action == "release":
                answer = kernel.release(state, key, now)
            elif action == "progress":
                answer = kernel.progress(state, key, n)
            else:   # the scheduler's own decision, for everyone: only its effect on this tenant is compared
                return kernel.schedule(state, now).state, "scheduled"
    except Refused as refusal:
        return state, refusal.code
    if isinstance(answer, kernel.KernelError):
        return state, answer.code.name
    if answer is None or isinstance(answer, kernel.Claim):
        return state, "same"
    return kernel.apply(state, answer), type(answer).__name__


def own(state: kernel.ClusterState, tenant: str) -> dict:
    """A tenant's claims as it can see them: by id, what it asked and where each stands."""
    return {names.bare(k): (c.spec.resources, c.spec.estimate_uj, names.bare(c.spec.gang_id), c.state,
                            c.completed_units)
            for k, c in state.claims.items() if c.tenant == tenant}


@settings(max_examples=150, deadline=None)
@given(ops=OPS)
def test_two_tenants_identical_ids_never_interact(ops):
    """Every answer tenant a gets, and its claims at the end, are the same
    whether or not tenant b is using the same claim and gang ids at the same
    time (the scheduler's own decisions aside: they weigh every tenant's
    claims by the rules, not by their names, so none is run here)."""
    mine = [op for op in ops if op[0] == "a" and op[1] != "admit"]
    everyone = [op for op in ops if op[1] != "admit"]
    alone, together = start(), start()
    told_alone, told_together = [], []
    for now, op in enumerate(everyone, 1):
        together, told = step(together, op, now)
        if op[0] == "a":
            told_together.append(told)
    for now, op in enumerate(mine, 1):
        alone, told = step(alone, op, now)
        told_alone.append(told)
    assert told_together == told_alone
    assert own(together, "a") == own(alone, "a")
    for claim_id in {op[2] for op in mine}:   # its ids resolve to its claims, whoever else has them
        try:
            key = names.resolve(together, claim_id, "", PRINCIPALS["a"])
        except Refused as refusal:
            assert refusal.code == "UNKNOWN_CLAIM"
            continue
        assert together.claims[key].tenant == "a"


@settings(max_examples=100, deadline=None)
@given(ops=OPS)
def test_an_id_two_tenants_use_is_ambiguous_only_without_a_tenant(ops):
    """An operator naming an id several tenants have gets AMBIGUOUS_CLAIM, and
    the claim with the tenant named; a tenant never sees another's."""
    state = start()
    for now, op in enumerate(ops, 1):
        state = step(state, op, now)[0]
    for claim_id in ("job-1", "job-2", "train-42"):
        holders = sorted(c.tenant for c in state.claims.values() if names.bare(c.claim_id) == claim_id)
        for tenant in holders:
            assert state.claims[names.resolve(state, claim_id, tenant, OPERATOR)].tenant == tenant
            assert state.claims[names.resolve(state, f"{tenant}/{claim_id}", "", OPERATOR)].tenant == tenant
            assert state.claims[names.resolve(state, claim_id, "", PRINCIPALS[tenant])].tenant == tenant
        for outsider in {"a", "b"} - set(holders):
            with pytest.raises(Refused, match=f"^UNKNOWN_CLAIM: no claim '{claim_id}'$"):
                names.resolve(state, claim_id, "", PRINCIPALS[outsider])
        if len(holders) > 1:
            with pytest.raises(Refused) as told:
                names.resolve(state, claim_id, "", OPERATOR)
            assert told.value.code == "AMBIGUOUS_CLAIM"


def test_an_older_ledgers_bare_keys_are_found_and_kept():
    """A claim submitted before names were per tenant is keyed by its bare id:
    it is still named by its id and tenant, and a resubmission meets it (the
    same key) instead of making a second claim."""
    state = start()
    old = ClaimSpec("job-1", "a", Resources(cpu_millis=100), estimate_uj=1000)
    state = kernel.apply(state, kernel.submit(state, old, 1))   # keyed bare, as an older service did
    assert names.resolve(state, "job-1", "", PRINCIPALS["a"]) == "job-1"
    assert names.resolve(state, "a/job-1", "", OPERATOR) == "job-1"
    assert names.spec(state, old).claim_id == "job-1"
    assert isinstance(kernel.submit(state, names.spec(state, old), 2), kernel.Claim)   # the same claim again
    with pytest.raises(Refused, match="^UNKNOWN_CLAIM"):
        names.resolve(state, "job-1", "", PRINCIPALS["b"])
    theirs = ClaimSpec("job-1", "b", Resources(cpu_millis=100), estimate_uj=1000)
    state = kernel.apply(state, kernel.submit(state, names.spec(state, theirs), 3))
    assert names.resolve(state, "job-1", "", PRINCIPALS["b"]) == "b/job-1"
    with pytest.raises(Refused, match="^AMBIGUOUS_CLAIM"):
        names.resolve(state, "job-1", "", OPERATOR)


def test_a_key_of_another_tenant_or_with_a_slash_is_not_a_valid_id():
    """The kernel takes a key TENANT/ID only with the claim's own tenant:
    a client's id holding a '/' is refused as before."""
    state = start()
    for claim_id in ("b/job-1", "x/y", "a/"):
        refused = kernel.submit(state, names.spec(state, ClaimSpec(claim_id, "a", Resources(cpu_millis=1),
                                                                   estimate_uj=5)))
        assert isinstance(refused, kernel.KernelError) and refused.code.name == "INVALID_CLAIM", claim_id
