"""The per-worker verdict that explain and placement share (`reasoner`,
which reads the request once) against the check order of RULES §5 as the
plain reference (reference.py) writes it, and the devices it picks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import reference  # tests/kernel/reference.py
from scheduler.kernel.fast.devices import device_test
from scheduler.kernel.placement import pick_devices, reasoner
from scheduler.kernel.reasons import Placement, Reason
from scheduler.kernel.loads import WorkerLoad
from scheduler.kernel.snapshot import ClaimSpec, Device, Resources, Worker

TYPES = ("A100", "H200")


@st.composite
def worker_and_load(draw) -> tuple[Worker, WorkerLoad]:
    types = draw(st.lists(st.sampled_from(TYPES), max_size=4))
    devices = tuple(Device(f"g{i}", t) for i, t in enumerate(types))
    worker = Worker("w", draw(st.integers(0, 8)), draw(st.integers(0, 8)), draw(st.integers(0, 8)), devices,
                    draw(st.integers(0, 3)), draw(st.booleans()), draw(st.booleans()))
    used = draw(st.one_of(st.just(()), st.tuples(*(st.sampled_from((0, 250, 500, 1000)) for _ in devices))))
    active = tuple(f"c{i}" for i in range(draw(st.integers(0, 3))))
    load = WorkerLoad(draw(st.integers(0, 8)), draw(st.integers(0, 8)), draw(st.integers(0, 8)), used, active,
                      draw(st.integers(0, 1)) if active else 0)
    return worker, load


specs = st.builds(lambda cpu, memory, disk, mdev, types, exclusive: ClaimSpec(
    "x", "t", Resources(cpu, memory, disk, mdev, tuple(sorted(set(types)))),
    Placement.PLACEMENT_EXCLUSIVE if exclusive else Placement.PLACEMENT_SHARED),
    st.integers(0, 8), st.integers(0, 8), st.integers(0, 8), st.sampled_from((0, 250, 500, 1000, 2000)),
    st.lists(st.sampled_from(TYPES), max_size=2), st.booleans())


def plain(worker: Worker, load: WorkerLoad) -> reference.Load:
    """The load as the reference keeps it."""
    used = load.device_used or (0,) * len(worker.devices)
    return reference.Load(load.cpu_millis, load.memory_mb, load.disk_mb,
                          {d.device_id: u for d, u in zip(worker.devices, used)}, len(load.active), load.exclusive)


@settings(max_examples=300)
@given(worker_and_load(), specs)
def test_reasoner_follows_the_check_order(pair, spec):
    worker, load = pair
    assert reasoner(spec)(worker, load) is reference.worker_reason(worker, plain(worker, load), spec)


@settings(max_examples=300)
@given(worker_and_load(), specs)
def test_devices_are_picked_as_the_rule_says(pair, spec):
    worker, load = pair
    assert pick_devices(worker, load, spec.resources) == reference.devices_for(worker, plain(worker, load), spec)


@settings(max_examples=300)
@given(worker_and_load(), specs)
def test_the_device_test_answers_as_picking_does(pair, spec):
    """fast/devices.py's test, where it has one, against its plain twin."""
    worker, load = pair
    test = device_test(spec.resources) if spec.resources.gpu_mdev else None
    if test is not None:
        assert test(worker, load) is (pick_devices(worker, load, spec.resources) is not None)
