"""The per-worker verdict that explain and placement share (`reasoner`,
which reads the request once) against the check order of RULES §5 written
out plainly, devices picked for real."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.kernel.placement import pick_devices, reasoner
from scheduler.kernel.reasons import Placement, Reason
from scheduler.kernel.snapshot import ClaimSpec, Device, Resources, Worker, WorkerLoad

TYPES = ("A100", "H200")


@st.composite
def worker_and_load(draw) -> tuple[Worker, WorkerLoad]:
    types = draw(st.lists(st.sampled_from(TYPES), max_size=4))
    devices = tuple(Device(f"g{i}", t) for i, t in enumerate(types))
    worker = Worker("w", draw(st.integers(0, 8)), draw(st.integers(0, 8)), draw(st.integers(0, 8)), devices,
                    draw(st.integers(0, 3)), draw(st.booleans()))
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


def plain_reason(worker: Worker, load: WorkerLoad, spec: ClaimSpec) -> Reason:
    req = spec.resources
    if not worker.live or not set(req.gpu_types) <= {d.device_type for d in worker.devices}:
        return Reason.WORKER_INELIGIBLE
    if spec.placement is Placement.PLACEMENT_EXCLUSIVE and load.active:
        return Reason.EXCLUSIVE_WORKER_BUSY
    if load.exclusive:
        return Reason.WORKER_HAS_EXCLUSIVE_TASK
    if any(getattr(load, f) + getattr(req, f) > getattr(worker, f) for f in ("cpu_millis", "memory_mb", "disk_mb")) \
            or pick_devices(worker, load, req) is None:
        return Reason.RESOURCE_RESERVATION_UNAVAILABLE
    if worker.max_concurrency and len(load.active) >= worker.max_concurrency:
        return Reason.WORKER_CONCURRENCY_REACHED
    return Reason.ADMISSIBLE


@settings(max_examples=300)
@given(worker_and_load(), specs)
def test_reasoner_follows_the_check_order(pair, spec):
    worker, load = pair
    assert reasoner(spec)(worker, load) is plain_reason(worker, load, spec)


def plain_devices(worker: Worker, load: WorkerLoad, req: Resources):
    """RULES §5's device choice written out: a fraction takes the fitting
    device with the least free mdev (then the lowest id), whole GPUs the
    lowest-id wholly free devices; only devices of a requested type."""
    if not req.gpu_mdev:
        return ()
    used = load.device_used or (0,) * len(worker.devices)
    mine = [(1000 - u, d.device_id) for d, u in zip(worker.devices, used)
            if not req.gpu_types or d.device_type in req.gpu_types]
    if req.gpu_mdev < 1000:
        fitting = sorted(pair for pair in mine if pair[0] >= req.gpu_mdev)
        return ((fitting[0][1], req.gpu_mdev),) if fitting else None
    free = sorted(device for free, device in mine if free == 1000)
    wanted = req.gpu_mdev // 1000
    return tuple((device, 1000) for device in free[:wanted]) if len(free) >= wanted else None


@settings(max_examples=300)
@given(worker_and_load(), specs)
def test_devices_are_picked_as_the_rule_says(pair, spec):
    worker, load = pair
    assert pick_devices(worker, load, spec.resources) == plain_devices(worker, load, spec.resources)
