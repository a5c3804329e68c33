"""Occupancy versions (service/windows/occupancy.py): recording keeps references,
not copies, and the weights made later are those of the state recorded;
`sent` walks back from the newest version, tested against the plain rule
("every older version not yet superseded is superseded now")."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scheduler import kernel
from scheduler.kernel import ClaimSpec, ConfigApplied, Device, Resources, Tenant, Worker, WorkerRegistered
from scheduler.service.windows.occupancy import Occupancies, issued

HOST = "w1"
WORKER = Worker(HOST, cpu_millis=8000, memory_mb=1 << 20, disk_mb=1 << 20,
                devices=tuple(Device(f"{HOST}-gpu{i}", "H200") for i in range(2)))
BASE = kernel.apply(kernel.apply(kernel.ClusterState(), ConfigApplied((Tenant("root", guarantee_uj=10**12,
                                                                              guarantee_mdev=10**6),))),
                    WorkerRegistered(WORKER))


def admitted(state: kernel.ClusterState, n: int, mdev: int, cpu: int) -> kernel.ClusterState:
    """`state` with one more claim, decided (admitted on HOST if it fits)."""
    event = kernel.submit(state, ClaimSpec(f"c{n}", "root", Resources(gpu_mdev=mdev, cpu_millis=cpu), estimate_uj=1))
    return kernel.decide(state, [event], n).state if isinstance(event, kernel.ClaimSubmitted) else state


@given(st.lists(st.tuples(st.sampled_from([0, 250, 1000]), st.sampled_from([0, 100])), max_size=12))
def test_a_recorded_version_has_the_weights_of_its_state(claims):
    occupancies, states = Occupancies(), []
    state = BASE
    for n, (mdev, cpu) in enumerate(claims, 1):
        state = admitted(state, n, mdev, cpu)
        occupancies.record(state, (HOST,), n)
        states.append(state)
    for n, then in enumerate(states, 1):
        assert occupancies.find(state, HOST, n, -1, 0).weights == issued(then, HOST, n).weights


def plain_sent(superseded: dict[int, int | None], version: int, now_ns: int) -> None:
    for v in superseded:
        if v < version and superseded[v] is None:
            superseded[v] = now_ns


@given(st.lists(st.one_of(st.tuples(st.just("record")), st.tuples(st.just("sent"), st.integers(0, 40))),
                max_size=60))
def test_sent_supersedes_as_the_plain_rule_does(ops):
    occupancies, model = Occupancies(), {}
    version = 0
    for now_ns, op in enumerate(ops, 1):
        if op[0] == "record":
            version += 1 + now_ns % 3   # increasing, with gaps, as receipt seqs are
            occupancies.record(BASE, (HOST,), version)
            model[version] = None
        else:
            occupancies.sent(HOST, op[1], now_ns)
            plain_sent(model, op[1], now_ns)
    assert {v: occupancies.find(BASE, HOST, v, -1, 0).superseded_ns for v in occupancies.versions(HOST)} == model
