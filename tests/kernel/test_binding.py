"""RULES §10, the claim-binding rule (kernel/binding.py), property-tested: on
random workers holding random whole-GPU and fractional claims, any sequence of
binds keeps every device within 1000 mdev, every claim's total, a bound claim's
devices fixed, the derived indexes equal to a rebuild, and the bound claim on
exactly the devices named."""

from __future__ import annotations

from hypothesis import given, strategies as st

from kit import cluster, gpus, run, spec, submitted
from scheduler.kernel import ClaimBound, ClaimState, ErrorCode, KernelError, Tenant, apply, bind, rebuild
from scheduler.kernel.events import event_from_body

TENANTS = [Tenant("root", guarantee_uj=10**15, guarantee_mdev=10**6), Tenant("a", "root", guarantee_uj=10**15,
                                                                               guarantee_mdev=10**6)]


@st.composite
def worlds(draw):
    """A 4-GPU worker and claims admitted on it by the kernel's own placement."""
    asks = draw(st.lists(st.sampled_from([250, 500, 1000, 2000]), min_size=1, max_size=6))
    state = cluster(TENANTS, [gpus("w", 4)])
    state = submitted(state, *(spec(f"c{i}", gpu_mdev=m) for i, m in enumerate(asks)))
    state, _, _ = run(state)
    return state


def admitted(state):
    return sorted(c.claim_id for c in state.claims.values() if c.state is ClaimState.ADMITTED)


@given(worlds(), st.lists(st.tuples(st.integers(0, 5), st.permutations(range(4))), max_size=6))
def test_any_sequence_of_binds_keeps_every_device_within_capacity_and_bound_claims_in_place(state, binds):
    if not admitted(state):
        return
    totals = {c: sum(d.mdev for d in state.claims[c].devices) for c in admitted(state)}
    for pick, order in binds:
        claim_id = admitted(state)[pick % len(admitted(state))]
        claim = state.claims[claim_id]
        wanted = max(1, claim.spec.resources.gpu_mdev // 1000)
        devices = tuple(f"w-gpu{i}" for i in order[:wanted])
        before = {c: state.claims[c].devices for c in admitted(state) if state.claims[c].bound}
        event = bind(state, claim_id, devices)
        if isinstance(event, KernelError):
            assert event.code is ErrorCode.BIND_CONFLICT
            continue
        if event is None:
            assert state.claims[claim_id].bound and {d.device_id for d in claim.devices} == set(devices)
            continue
        assert event_from_body(event.kind, event.to_body()) == event   # a receipt reads back as the event
        state = apply(state, event)
        assert state == rebuild(state)
        assert {d.device_id for d in state.claims[claim_id].devices} == set(devices) and state.claims[claim_id].bound
        assert all(u <= 1000 for u in state.loads["w"].device_used)
        assert {c: sum(d.mdev for d in state.claims[c].devices) for c in admitted(state)} == totals
        for other, devices_before in before.items():
            if other != claim_id:
                assert state.claims[other].devices == devices_before, "a bound claim never moves"


def test_a_bind_swaps_an_unbound_claim_off_the_device_and_refuses_a_bound_one():
    state = cluster(TENANTS, [gpus("w", 2)])
    state, _, _ = run(submitted(state, spec("x", gpu_mdev=1000), spec("y", gpu_mdev=1000)))
    assert [d.device_id for d in state.claims["x"].devices] == ["w-gpu0"]
    event = bind(state, "x", ("w-gpu1",))   # Slurm gave x the device Pool gave y
    assert isinstance(event, ClaimBound) and [b.claim_id for b in event.bindings] == ["x", "y"]
    state = apply(state, event)
    assert [d.device_id for d in state.claims["y"].devices] == ["w-gpu0"] and not state.claims["y"].bound
    refused = bind(state, "y", ("w-gpu1",))
    assert isinstance(refused, KernelError) and refused.code is ErrorCode.BIND_CONFLICT and "'x'" in refused.message
    assert bind(state, "x", ("w-gpu1",)) is None   # bound already: nothing to record
    assert bind(state, "x", ("w-gpu0", "w-gpu1")).code is ErrorCode.INVALID_ARGUMENT
    assert bind(state, "x", ("v-gpu0",)).code is ErrorCode.BIND_CONFLICT
    pending = submitted(state, spec("z", gpu_mdev=1000))
    assert bind(pending, "z", ("w-gpu0",)).code is ErrorCode.CLAIM_NOT_ADMITTED
