"""occupancy.Holders on a host holding more claims than fast/held.SMALL (a
sortedseq.Shared): the last answer with the claims that left taken out and
those that came put in, through random admissions and releases, is what
occupants() computes from the state there and then; and an answer handed out
is never changed afterwards."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import kernel
from scheduler.kernel import ClaimSpec, ConfigApplied, Device, Resources, Tenant, Worker, WorkerRegistered
from scheduler.kernel.fast.held import SMALL
from scheduler.service.windows.occupancy import Holders, occupants

WORKER = Worker("w1", cpu_millis=10**6, memory_mb=1 << 20, disk_mb=1 << 20,
                devices=tuple(Device(f"w1-gpu{i}", "H200") for i in range(2)))
BASE = kernel.decide(kernel.ClusterState(), [ConfigApplied((Tenant("root", guarantee_uj=10**12, guarantee_mdev=2000),)),
                                             WorkerRegistered(WORKER)], 0).state


def submitted(state: kernel.ClusterState, n: int, cpu: int, mdev: int) -> kernel.ClusterState:
    event = kernel.submit(state, ClaimSpec(f"c{n:04}", "root", Resources(cpu_millis=cpu, gpu_mdev=mdev),
                                           estimate_uj=1), n)
    return kernel.decide(state, [event], n).state


@settings(max_examples=30)
@given(st.lists(st.one_of(st.tuples(st.just("submit"), st.sampled_from([0, 1, 5]), st.sampled_from([0, 0, 10, 100])),
                          st.tuples(st.just("release"), st.integers(0, 400))), max_size=60))
def test_kept_occupants_of_a_busy_host_are_its_occupants(ops):
    state = BASE
    for n in range(SMALL + 10):   # past SMALL: the host's open ids are a Shared
        state = submitted(state, n, 1, 10 if n % 7 == 0 else 0)
    holders, handed = Holders(), []
    for n, op in enumerate(ops, SMALL + 10):
        if op[0] == "submit":
            state = submitted(state, n, op[1], op[2])
        else:
            event = kernel.release(state, f"c{op[1]:04}", n)
            if not isinstance(event, kernel.KernelError):
                state = kernel.decide(state, [event], n).state
        got = holders(state, "w1")
        assert got == occupants(state, "w1")
        handed.append((got, copy.deepcopy(got)))
    assert all(answer == kept for answer, kept in handed)
