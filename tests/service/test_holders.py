"""occupancy.Holders on a host holding more claims than fast/held.SMALL (a
sortedseq.Shared): the last answer with the claims that left taken out and
those that came put in, through random admissions and releases, is what
occupants() computes from the state there and then; and an answer handed out
is never changed afterwards, also when asked under an edit batch (the engine
folds a commit's receipts in one). The current version's weights
(Occupancies.find, kept while the holders are the same) are `issued`'s. And occupancy_wire.OccupancyWire's
pushes, made from those answers, are what agents.occupancy builds."""

from __future__ import annotations

from contextlib import nullcontext

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import kernel
from scheduler.kernel import ClaimSpec, ConfigApplied, Device, Resources, Tenant, Worker, WorkerRegistered
from protos.pool.v1 import agent_pb2, types_pb2
from scheduler.kernel.fast.edit import Edit
from scheduler.kernel.fast.held import SMALL
from scheduler.service.agents import occupancy
from scheduler.service.windows.occupancy import Holders, Occupancies, issued, occupants
from scheduler.service.windows.occupancy_wire import OccupancyWire

WORKER = Worker("w1", cpu_millis=10**6, memory_mb=1 << 20, disk_mb=1 << 20,
                devices=tuple(Device(f"w1-gpu{i}", "H200") for i in range(2)))
BASE = kernel.decide(kernel.ClusterState(), [ConfigApplied((Tenant("root", guarantee_uj=10**12, guarantee_mdev=2000),)),
                                             WorkerRegistered(WORKER)], 0).state


def submitted(state: kernel.ClusterState, n: int, cpu: int, mdev: int) -> kernel.ClusterState:
    event = kernel.submit(state, ClaimSpec(f"c{n:04}", "root", Resources(cpu_millis=cpu, gpu_mdev=mdev),
                                           estimate_uj=1), n)
    return kernel.decide(state, [event], n).state


# the host's meters: its GPUs and two CPU packages (each is sent every claim with reserved CPU)
METERS = [types_pb2.DeviceMeter(device_id=d.device_id, kind=types_pb2.GPU) for d in WORKER.devices] + [
    types_pb2.DeviceMeter(device_id=f"cpu:{i}", kind=types_pb2.CPU_PACKAGE) for i in range(2)]


def plain(held) -> dict[str, dict[str, int]]:
    return {key: dict(holders.items()) for key, holders in held.items()}


@settings(max_examples=30)
@given(st.lists(st.one_of(st.tuples(st.just("submit"), st.sampled_from([0, 1, 5]), st.sampled_from([0, 0, 10, 100])),
                          st.tuples(st.just("release"), st.integers(0, 400))), max_size=60),
       st.sampled_from([0, 3, SMALL + 10]), st.booleans())
def test_kept_occupants_of_a_busy_host_are_its_occupants(ops, first, in_edit):
    state = BASE
    for n in range(first):   # past SMALL: the host's open ids are a Shared
        state = submitted(state, n, 1, 10 if n % 7 == 0 else 0)
    holders, wire, handed = Holders(), OccupancyWire(), []
    occupancies = Occupancies(holders)
    with Edit() if in_edit else nullcontext():   # one edit batch over every step, or none
        for n, op in enumerate(ops, first):
            if op[0] == "submit":
                state = submitted(state, n, op[1], op[2])
            else:
                event = kernel.release(state, f"c{op[1]:04}", n)
                if not isinstance(event, kernel.KernelError):
                    state = kernel.decide(state, [event], n).state
            got = holders(state, "w1")
            assert plain(got) == occupants(state, "w1")
            handed.append((got, plain(got)))
            if n % 2:   # the current version's weights, kept while the holders are the same
                for _ in range(2):
                    assert dict(occupancies.find(state, "w1", n, n, 0).weights.items()) == \
                        dict(issued(state, "w1", n).weights.items())
            if n % 3:   # not every step pushed: a push may follow several changes
                sent = agent_pb2.SchedulerMessage.FromString(wire.message(state, "w1", METERS, n, got))
                assert sent == agent_pb2.SchedulerMessage(occupancy=occupancy(state, "w1", METERS, n))
    assert all(plain(answer) == kept for answer, kept in handed)


def test_a_push_to_an_empty_host_is_the_twins():
    """Version 0, no holders: the fields left out are those protobuf leaves out."""
    wire = OccupancyWire()
    assert wire.message(BASE, "w1", METERS, 0, {}) == agent_pb2.SchedulerMessage(
        occupancy=occupancy(BASE, "w1", METERS, 0)).SerializeToString()
