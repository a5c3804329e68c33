"""Issue 12's found cases, each against a real scheduler: the scheduler
believes only what it can check, every field is bounded, and no input stops
it. Each refusal is asserted by its gRPC status, its code and its reason,
and leaves the ledger head and the state as they were."""

from __future__ import annotations

import queue
import resource
import socket
import threading
import time
import urllib.request

import grpc
import pytest

from protos.pool.v1 import agent_pb2, claims_pb2, ops_pb2, types_pb2
from scheduler.service.agents import OCCUPANCY_EVERY_S

SECOND = 1_000_000_000
HW, MODEL = types_pb2.GRADE_HW_SHUNT, types_pb2.GRADE_MODEL_BASED
U64 = (1 << 64) - 1
INVALID, PRECONDITION, EXHAUSTED = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
                                    grpc.StatusCode.RESOURCE_EXHAUSTED)


# -- what "nothing changed" means ------------------------------------------------------

def wait_for(what: str, ready, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def observable(s) -> tuple:
    """The ledger head and everything a client can read of the state."""
    head = s.ops.LedgerHead(ops_pb2.LedgerHeadRequest(), timeout=10)
    claims = s.claims.List(claims_pb2.ListClaimsRequest(), timeout=10)
    workers = s.ops.Workers(ops_pb2.WorkersRequest(), timeout=10)
    splits = s.ops.Splits(ops_pb2.SplitsRequest(), timeout=10)
    return head.length, head.head, claims, workers, splits


def refused(s, call, request, status: grpc.StatusCode, details: str) -> None:
    """`call` is refused with `status` and a message starting `details`, and changes nothing."""
    before = observable(s)
    with pytest.raises(grpc.RpcError) as caught:
        call(request, timeout=30)
    assert caught.value.code() == status, caught.value.details()
    assert caught.value.details().startswith(details), caught.value.details()
    assert observable(s) == before


# -- a fake agent: a registered host and a stream fed from the test --------------------

def register(s, host: str = "h1", gpus: int = 2, devices: list | None = None):
    devices = devices if devices is not None else [
        types_pb2.DeviceMeter(device_id=f"{host}-gpu{i}", kind=types_pb2.GPU, device_type="NVIDIA H200")
        for i in range(gpus)]
    capacity = types_pb2.Capacity(resources=types_pb2.Resources(cpu_millis=64_000, memory_mb=1 << 20,
                                                                disk_mb=1 << 20, gpu_mdev=1000 * gpus))
    return s.agents.Register(agent_pb2.RegisterRequest(host_id=host, capacity=capacity, devices=devices), timeout=10)


class Feed:
    """One Stream: messages go up as the test puts them; what comes down is kept."""

    def __init__(self, s, host: str = "h1", read: bool = True) -> None:
        self._up: queue.Queue = queue.Queue()
        self._up.put(agent_pb2.AgentMessage(hello=agent_pb2.Hello(host_id=host)))
        self.call = s.agents.Stream(iter(self._up.get, None), timeout=60)
        self.down: queue.Queue = queue.Queue()
        self.error: grpc.RpcError | None = None
        if read:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for message in self.call:
                self.down.put(message)
        except grpc.RpcError as error:
            self.error = error
        self.down.put(None)

    def send(self, *windows: agent_pb2.Window) -> None:
        self._up.put(agent_pb2.AgentMessage(batch=agent_pb2.WindowBatch(windows=windows)))

    def occupancy(self) -> agent_pb2.Occupancy:
        while (message := self.down.get(timeout=10)) is not None:
            if message.HasField("occupancy"):
                return message.occupancy
        raise AssertionError(f"the stream ended: {self.error}")

    def acked(self, seq: int) -> None:
        while (message := self.down.get(timeout=10)) is not None:
            if message.HasField("ack") and message.ack.acked_seq >= seq:
                return
        raise AssertionError(f"the stream ended before ack {seq}: {self.error}")

    def ended(self) -> grpc.RpcError:
        while self.down.get(timeout=30) is not None:
            pass
        assert self.error is not None
        return self.error

    def close(self) -> None:
        self._up.put(None)
        self.call.cancel()


def window(seq: int, start: int, uj: int = 100_000_000, device: str = "h1-gpu0", version: int = 0,
           shares: list | None = None, duration: int = SECOND, grade: int = HW) -> agent_pb2.Window:
    shares = [("unallocated", uj, grade)] if shares is None else shares
    return agent_pb2.Window(device_id=device, seq=seq, start_ns=start, end_ns=start + duration, uj=uj, grade=grade,
                            occupancy_version=version,
                            shares=[types_pb2.Share(occupant=o, uj=u, grade=g) for o, u, g in shares])


def streaming(s) -> dict[str, bool]:
    return {w.worker: w.live for w in s.ops.Workers(ops_pb2.WorkersRequest(), timeout=10).workers}


def not_streaming(s, host: str) -> None:
    wait_for(f"{host}'s stream to end", lambda: not streaming(s).get(host))


def refused_batch(s, host: str, *windows: agent_pb2.Window, details: str,
                  status: grpc.StatusCode = INVALID) -> None:
    """A stream whose one batch is refused: the code and reason, and nothing changed."""
    live = streaming(s).get(host)
    before = observable(s)
    feed = Feed(s, host)
    feed.send(*windows)
    error = feed.ended()
    assert error.code() == status, error.details()
    assert error.details().startswith(details), error.details()
    if not live:
        not_streaming(s, host)
    assert observable(s) == before


JOB = "alpha/job"   # claim job of tenant alpha as an agent knows it: by its key (docs/RULES.md §11)


def submit(s, claim_id: str, **fields) -> claims_pb2.ClaimStatus:
    base = dict(tenant="alpha", estimate_uj=1_000_000, resources=types_pb2.Resources(cpu_millis=10))
    return s.claims.Submit(claims_pb2.SubmitRequest(claim_id=claim_id, **{**base, **fields}), timeout=10)


# -- windows: checked against the scheduler's own state --------------------------------

@pytest.fixture
def held(cluster):
    """h1 and h2 registered; claim `job` holds a quarter of one of h1's GPUs; a
    good window counted on that GPU; an agent stream for h1 open on its occupancy."""
    s = cluster()
    register(s, "h1")
    job = submit(s, "job", resources=types_pb2.Resources(gpu_mdev=250))
    assert job.state == types_pb2.ADMITTED and job.worker == "h1", job
    register(s, "h2")
    feed = Feed(s, "h1")
    occupancy = feed.occupancy()
    device = next(d.device_id for d in occupancy.devices if JOB in d.occupants)
    t0 = time.time_ns() - 60 * SECOND
    feed.send(window(1, t0, 1_000, device, occupancy.version, [(JOB, 250, MODEL), ("unallocated", 750, MODEL)]))
    feed.acked(1)
    feed.close()
    not_streaming(s, "h1")
    return s, occupancy.version, device, t0 + SECOND


def _job_split(uj: int) -> list:
    return [(JOB, uj // 4, MODEL), ("unallocated", uj - uj // 4, MODEL)]


def test_a_share_may_name_only_a_claim_admitted_on_that_host_and_device(held):
    s, version, device, t = held
    other = "h1-gpu1" if device == "h1-gpu0" else "h1-gpu0"
    problem = "INVALID_WINDOW: window seq 2 from 'h1': shares"
    refused_batch(s, "h1", window(2, t, 1000, other, version, _job_split(1000)), details=problem)   # another device
    refused_batch(s, "h2", window(2, t, 1000, "h2-gpu0", version, _job_split(1000)),
                  details="INVALID_WINDOW: window seq 2 from 'h2': occupancy version")                 # another host
    refused_batch(s, "h1", window(2, t, 1000, device, version, [("ghost", 250, MODEL), ("unallocated", 750, MODEL)]),
                  details=problem)                                                                   # nobody's claim
    refused_batch(s, "h1", window(2, t, 1000, device, version, [("unallocated", 1000, HW)]),
                  details=problem)                                                                   # job not charged


def test_an_occupancy_version_never_sent_is_refused(held):
    s, version, device, t = held
    refused_batch(s, "h1", window(2, t, 1000, device, version + 1000, _job_split(1000)),
                  details=f"INVALID_WINDOW: window seq 2 from 'h1': occupancy version {version + 1000} is not one "
                          "the scheduler sent")


@pytest.mark.parametrize("start, problem", [
    (-SECOND // 2, "start_ns {start} is before the end of the device's previous window, {t}"),   # overlaps
    (1, "start_ns 1 is more than 604800 s before the scheduler's clock"),                      # 1970
    (4_102_444_800 * SECOND, "end_ns {end} is more than 10 s after the scheduler's clock"),    # 2100
])
def test_a_window_must_follow_its_device_and_not_lie_in_the_future(held, start, problem):
    s, version, device, t = held
    start = t + start if start < 0 else start
    refused_batch(s, "h1", window(2, start, 1000, device, version, _job_split(1000)),
                  details="INVALID_WINDOW: window seq 2 from 'h1': "
                          + problem.format(start=start, t=t, end=start + SECOND))


def test_a_window_ending_at_2_pow_63_is_refused(held):
    s, version, device, t = held
    w = window(2, t, 1000, device, version, _job_split(1000))
    w.end_ns = 1 << 63
    refused_batch(s, "h1", w, details="INVALID_WINDOW: window seq 2 from 'h1': end_ns 9223372036854775808 is more "
                                      "than 10 s after the scheduler's clock")


def test_a_figure_above_the_devices_power_is_refused_and_the_claim_stays_releasable(held):
    s, version, device, t = held
    refused_batch(s, "h1", window(2, t, U64, device, version, _job_split(U64)),
                  details=f"INVALID_WINDOW: window seq 2 from 'h1': {U64} µJ in 1000000000 ns is above 1000 W, "
                          "the most a 'NVIDIA H200' device may draw")
    assert s.claims.Release(claims_pb2.ReleaseRequest(claim_id="job"), timeout=10).state == types_pb2.RELEASED


def test_a_seq_far_ahead_is_refused_and_real_windows_still_count(held):
    s, version, device, t = held
    refused_batch(s, "h1", window(U64, t, 1000, device, version, _job_split(1000)),
                  details=f"INVALID_WINDOW: window seq {U64} from 'h1': seq is more than 1000000 above the 1 counted")
    feed = Feed(s, "h1")
    feed.occupancy()
    feed.send(window(2, t, 1000, device, version, _job_split(1000)))
    feed.acked(2)
    feed.close()
    not_streaming(s, "h1")
    assert register(s, "h1").acked_seq == 2


def test_a_second_stream_cannot_take_over_a_live_host(held):
    s, version, device, t = held
    feed = Feed(s, "h1")
    feed.occupancy()
    feed.send(window(2, t, 1000, device, version, _job_split(1000)))
    feed.acked(2)   # h1 is live on this stream
    refused_batch(s, "h1", details="HOST_STREAMING: host 'h1' is live on another stream", status=PRECONDITION)
    feed.send(window(3, t + SECOND, 1000, device, version, _job_split(1000)))
    feed.acked(3)   # the first stream carries on
    assert streaming(s)["h1"]
    feed.close()


def test_a_reregistration_may_not_drop_gpus_that_claims_hold(held):
    s, version, device, t = held
    capacity = types_pb2.Capacity(resources=types_pb2.Resources(cpu_millis=64_000, memory_mb=1 << 20))
    refused(s, s.agents.Register, agent_pb2.RegisterRequest(host_id="h1", capacity=capacity),
            PRECONDITION, f"DEVICES_HELD: devices: 'h1' would drop {device!r}, which claim 'alpha/job' holds")


def test_a_hosts_occupancy_is_pushed_at_most_every_interval_and_the_last_push_holds_every_claim(cluster):
    """Twenty admissions on h1 one after another, each its own commit: h1's
    stream is pushed at most one occupancy per OCCUPANCY_EVERY_S meanwhile
    (not one a commit), and the pushes go on until one holds every claim."""
    s = cluster()
    register(s, "h1")
    feed = Feed(s, "h1")
    assert not any(d.occupants for d in feed.occupancy().devices)   # the stream's first push
    start = time.monotonic()
    for i in range(20):
        assert submit(s, f"tiny{i}", resources=types_pb2.Resources(gpu_mdev=10)).state == types_pb2.ADMITTED
    wanted, held, pushes = {f"alpha/tiny{i}" for i in range(20)}, set(), 0
    while held != wanted:
        held = {key for device in feed.occupancy().devices for key in device.occupants}
        pushes += 1
    assert pushes <= (time.monotonic() - start) / OCCUPANCY_EVERY_S + 1, pushes
    feed.close()


def test_a_refused_first_batch_leaves_no_liveness_receipt(cluster):
    s = cluster()
    register(s, "h1")
    t = time.time_ns() - 60 * SECOND
    refused_batch(s, "h1", window(1, t, 10, shares=[("unallocated", 9, HW)]),
                  details="INVALID_WINDOW: window seq 1 from 'h1': shares sum to 9, not 10")


# -- claims: every field bounded ------------------------------------------------------

@pytest.fixture(scope="module")
def quiet(tmp_path_factory, harness):
    """One scheduler for the claim refusals (a refusal changes nothing, so they share it),
    with a worker registered and a gang admitted."""
    s = harness.Scheduler(tmp_path_factory.mktemp("claims")).start()
    register(s, "h1")
    for member in ("g-1", "g-2"):
        submit(s, member, gang_id="g", gang_size=2)
    yield s
    s.stop()


@pytest.mark.parametrize("fields, status, details", [
    (dict(gang_id="g" * (3_900_000)), INVALID, "INVALID_CLAIM: gang_id: gang_id must match [A-Za-z0-9._:-]{1,128}"),
    (dict(resources=types_pb2.Resources(gpu_mdev=500, gpu_types=[f"t{i}" for i in range(20_000)])), INVALID,
     "INVALID_CLAIM: resources.gpu_types: at most 16 gpu_types of at most 64 characters each"),
    (dict(estimate_uj=U64), PRECONDITION, "CLAIM_NEVER_FITS: estimate_uj: its hold of 18446744073709551615 µJ is "
                                          "above the root's guarantee of 100000000000 µJ"),
    (dict(resources=types_pb2.Resources(gpu_mdev=U64 // 1000 * 1000)), PRECONDITION,
     "CLAIM_NEVER_FITS: resources.gpu_mdev:"),
    (dict(estimate_uj=0), INVALID, "INVALID_CLAIM: estimate_uj: estimate_uj must be positive"),
    (dict(claim_id="unallocated"), INVALID, "INVALID_CLAIM: claim_id: claim_id 'unallocated' is reserved"),
    (dict(work_class="no such class!"), INVALID, "INVALID_CLAIM: work_class: work_class must match"),
    (dict(gang_id="g", gang_size=2), INVALID, "INVALID_CLAIM: gang_id: gang 'g' was admitted and has open members"),
    (dict(gang_id="g", gang_size=2 ** 31), INVALID, "INVALID_CLAIM: gang_size: a gang member needs 1 <= gang_size"),
    (dict(placement=7), INVALID, "INVALID_ARGUMENT: placement: 7 is not a Placement value"),
])
def test_a_claim_out_of_bounds_is_refused_by_its_field(quiet, fields, status, details):
    request = claims_pb2.SubmitRequest(**{**dict(claim_id="c", tenant="alpha", estimate_uj=1_000_000), **fields})
    refused(quiet, quiet.claims.Submit, request, status, details)


def test_a_claim_larger_than_every_worker_waits_saying_no_worker_can_take_it(quiet):
    status = submit(quiet, "huge", resources=types_pb2.Resources(cpu_millis=U64))
    assert status.state == types_pb2.PENDING and status.reason == types_pb2.NO_ELIGIBLE_WORKER, status
    quiet.claims.Release(claims_pb2.ReleaseRequest(claim_id="huge"), timeout=10)


def test_a_gang_id_is_its_tenants_own(quiet):
    """Gang members share a tenant: another tenant's member with the same gang
    id (and another size) starts a gang of its own (docs/RULES.md §11), and
    the first gang still waits for its members."""
    submit(quiet, "t-1", gang_id="t", gang_size=3)
    theirs = quiet.claims.Submit(claims_pb2.SubmitRequest(claim_id="t-2", tenant="beta", estimate_uj=1,
                                                          gang_id="t", gang_size=2), timeout=10)
    assert (theirs.tenant, theirs.gang_id, theirs.reason) == ("beta", "t", types_pb2.GANG_INCOMPLETE)
    mine = quiet.claims.Get(claims_pb2.GetClaimRequest(claim_id="t-1"), timeout=10)
    assert (mine.tenant, mine.gang_id, mine.reason) == ("alpha", "t", types_pb2.GANG_INCOMPLETE)
    for claim_id in ("t-1", "t-2"):
        quiet.claims.Release(claims_pb2.ReleaseRequest(claim_id=claim_id), timeout=10)


def test_unknown_enum_values_and_hostile_ids_elsewhere(quiet):
    refused(quiet, quiet.claims.List, claims_pb2.ListClaimsRequest(states=[99]), INVALID,
            "INVALID_ARGUMENT: states: 99 is not a ClaimState value")
    refused(quiet, quiet.agents.Register, agent_pb2.RegisterRequest(
        host_id="h2", devices=[types_pb2.DeviceMeter(device_id="d", kind=42)]), INVALID,
        "INVALID_ARGUMENT: devices[0].kind: 42 is not a DeviceKind value")
    refused(quiet, quiet.agents.Register, agent_pb2.RegisterRequest(
        host_id="h2", devices=[types_pb2.DeviceMeter(device_id="gpu 0", kind=types_pb2.GPU)]), INVALID,
        "INVALID_ARGUMENT: devices: every device needs a distinct id matching")
    long = "x" * 1_000_000
    refused(quiet, quiet.claims.Release, claims_pb2.ReleaseRequest(claim_id=long), grpc.StatusCode.NOT_FOUND,
            "UNKNOWN_CLAIM: no claim 'xxx")


# -- no input stops the service -------------------------------------------------------

def test_a_window_batch_of_a_million_shares_is_refused_and_the_scheduler_serves_on(cluster):
    s = cluster()
    register(s, "h1")
    w = window(1, time.time_ns() - 60 * SECOND, 10, shares=[])
    w.shares.extend([types_pb2.Share()] * 1_000_000)
    refused_batch(s, "h1", w, details="INVALID_WINDOW: window seq 1 from 'h1': the window and each of its shares "
                                      "need a grade")
    assert s.serving()


def test_a_receipt_over_the_core_cap_is_too_large_and_changes_nothing(cluster, harness):
    s = cluster(harness.TREE + "\n[limits]\nmax_message_bytes = 33554432\nmax_windows_per_batch = 200000\n"
                       "max_unacked_windows = 200000\nwindows_per_s = 0\n")
    register(s, "h1")
    n = 150_000
    t = time.time_ns() - 3600 * SECOND
    windows = [window(i + 1, t + i * 1000, 1, duration=1000) for i in range(n)]
    refused_batch(s, "h1", *windows, status=EXHAUSTED,
                  details="TOO_LARGE: a 'windows' receipt ")
    feed = Feed(s, "h1")   # the scheduler serves on, and counts the next good batch
    feed.send(*windows[:10])
    feed.acked(10)
    feed.close()
    assert s.serving()


def test_a_stream_flooding_windows_is_paused_at_its_rate(cluster, harness):
    s = cluster(harness.TREE + "\n[limits]\nwindows_per_s = 2000\nwindow_burst = 2000\n")
    register(s, "h1")
    feed = Feed(s, "h1", read=False)   # never reads its acks
    t = time.time_ns() - 3600 * SECOND
    started = time.monotonic()   # before the first send: the scheduler may count while the rest are sent
    for b in range(100):   # 100,000 windows offered at once
        feed.send(*(window(b * 1000 + i + 1, t + (b * 1000 + i) * 1000, 1, duration=1000) for i in range(1000)))
    time.sleep(3)
    counted = register(s, "h1").acked_seq
    elapsed = time.monotonic() - started + 1
    assert 0 < counted <= 2000 + 2000 * elapsed + 1000, counted
    assert s.serving()
    feed.close()


def test_idle_connections_past_the_default_file_limit_do_not_lock_out_health(cluster, tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 4096:
        pytest.skip(f"the hard file limit here is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))   # the scheduler starts under the default soft limit
    try:
        s = cluster()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    host, port = s.address.rsplit(":", 1)
    idle = []
    try:
        for _ in range(1_100):
            idle.append(socket.create_connection((host, int(port)), timeout=5))
        time.sleep(0.5)
        assert s.serving()
        assert s.json("claims") == {"claims": []}
    finally:
        for sock in idle:
            sock.close()


def test_list_and_splits_answer_a_page_at_a_time_and_poolctl_follows(cluster, harness):
    s = cluster(harness.TREE + "\n[limits]\npage_size = 5\nmax_page_size = 7\nlist_page_size = 5\n")
    register(s, "h1", gpus=8)
    for i in range(12):
        submit(s, f"c{i:02}")
    first = s.claims.List(claims_pb2.ListClaimsRequest(), timeout=10)
    assert [c.claim_id for c in first.claims] == [f"c{i:02}" for i in range(5)] and first.next_page_token
    second = s.claims.List(claims_pb2.ListClaimsRequest(page_token=first.next_page_token, page_size=7), timeout=10)
    assert [c.claim_id for c in second.claims] == [f"c{i:02}" for i in range(5, 12)] and not second.next_page_token
    refused(s, s.claims.List, claims_pb2.ListClaimsRequest(page_size=8), INVALID, "INVALID_ARGUMENT: page_size: at most 7")
    assert [c["claim_id"] for c in s.json("claims")["claims"]] == [f"c{i:02}" for i in range(12)]

    feed = Feed(s, "h1")
    occupancy = feed.occupancy()
    t = time.time_ns() - 60 * SECOND
    feed.send(*(window(i + 1, t + i * SECOND, 1000, device=f"h1-gpu{i % 8}", version=occupancy.version)
                for i in range(13)))
    feed.acked(13)
    feed.close()
    rows, devices, token = [], [], ""
    while True:   # device totals are paged too: 8 devices, 5 a page (80,000 made 21 MiB on one page)
        page = s.ops.Splits(ops_pb2.SplitsRequest(page_token=token), timeout=10)
        assert len(page.rows) <= 5 and len(page.devices) <= 5 and (bool(page.totals) == (not token))
        rows += page.rows
        devices += page.devices
        if not (token := page.next_page_token):
            break
    assert len(rows) == 13 and sum(r.uj for r in rows) == 13_000
    assert [d.device_id for d in devices] == [f"h1-gpu{i}" for i in range(8)] and sum(d.uj for d in devices) == 13_000
    doc = s.json("splits")
    assert len(doc["rows"]) == 13 and [t["uj"] for t in doc["totals"]] == [13_000] and len(doc["devices"]) == 8


def test_submissions_past_the_rate_or_the_open_claim_cap_are_refused(cluster, harness):
    s = cluster(harness.TREE + "\n[limits]\nsubmits_per_s = 1\nsubmit_burst = 3\nmax_open_claims_per_tenant = 2\n")
    submit(s, "a1")
    submit(s, "a2")
    refused(s, s.claims.Submit, claims_pb2.SubmitRequest(claim_id="a3", tenant="alpha", estimate_uj=1),
            EXHAUSTED, "TOO_MANY_OPEN_CLAIMS: tenant 'alpha' has 2 open claims")
    s.claims.Release(claims_pb2.ReleaseRequest(claim_id="a1"), timeout=10)
    submit(s, "a3")   # room again, and the third token of the burst
    refused(s, s.claims.Submit, claims_pb2.SubmitRequest(claim_id="b1", tenant="beta", estimate_uj=1),
            EXHAUSTED, "RATE_LIMITED: 'operator' is over 1 submissions a second")
    # the rate is the caller's own: another principal still has its burst
    beta = s.as_principal("beta").claims
    assert beta.Submit(claims_pb2.SubmitRequest(claim_id="b1", tenant="beta", estimate_uj=1), timeout=10).claim_id == "b1"
    s.stop()
    s.start()   # the open claims are counted again from the ledger's when serving starts: a2 and a3
    refused(s, s.claims.Submit, claims_pb2.SubmitRequest(claim_id="a4", tenant="alpha", estimate_uj=1),
            EXHAUSTED, "TOO_MANY_OPEN_CLAIMS: tenant 'alpha' has 2 open claims")


# -- issue 21, item 4: evidence within what a device can do --------------------------------

def _gap(seq: int, start: int, device: str, version: int, reason: int = types_pb2.GAP_SPOOL_OVERFLOW,
         lost: int = 0) -> agent_pb2.Window:
    return agent_pb2.Window(device_id=device, seq=seq, start_ns=start, end_ns=start + SECOND, grade=MODEL,
                            occupancy_version=version, gap_reason=reason, lost_windows=lost)


def _device_total(s, device: str) -> ops_pb2.DeviceTotal:
    return next(d for d in s.ops.Splits(ops_pb2.SplitsRequest(), timeout=10).devices if d.device_id == device)


def test_lost_windows_are_on_gaps_only_and_no_more_than_the_gaps_span_holds(held):
    s, version, device, t = held
    measured = window(2, t, 1000, device, version, _job_split(1000))
    measured.lost_windows = 3
    refused_batch(s, "h1", measured, details="INVALID_WINDOW: window seq 2 from 'h1': a window with a figure has "
                                             "no lost windows")
    refused_batch(s, "h1", _gap(2, t, device, version, lost=2 ** 32 - 1),
                  details="INVALID_WINDOW: window seq 2 from 'h1': lost_windows 4294967295 is more than a gap of "
                          "1000000000 ns can hold (21: one window per 50 ms, and one more)")
    feed = Feed(s, "h1")
    feed.send(_gap(2, t, device, version, lost=21))   # as much as a second's gap holds: counted
    feed.acked(2)
    feed.close()
    assert _device_total(s, device).lost_windows == 21


def test_a_gap_reason_the_contract_does_not_name_is_refused(held):
    s, version, device, t = held
    refused_batch(s, "h1", _gap(2, t, device, version, reason=99),
                  details="INVALID_WINDOW: window seq 2 from 'h1': gap_reason 99 is not a GapReason value")


def test_mean_uw_must_be_what_uj_and_the_span_give(held):
    s, version, device, t = held
    stated = window(2, t, 1000, device, version, _job_split(1000))
    stated.mean_uw = 5
    refused_batch(s, "h1", stated, details="INVALID_WINDOW: window seq 2 from 'h1': mean_uw 5 is not what 1000 µJ "
                                           "in 1000000000 ns give, 1000")
    gap = _gap(2, t, device, version, reason=types_pb2.GAP_METER_ERROR)
    gap.mean_uw = 1
    refused_batch(s, "h1", gap, details="INVALID_WINDOW: window seq 2 from 'h1': a window with no figure has no "
                                        "mean_uw")
    stated.mean_uw = 1000   # 1,000 µJ in one second
    feed = Feed(s, "h1")
    feed.send(stated)
    feed.acked(2)
    feed.close()


def test_a_host_registers_no_more_gpu_than_its_devices_and_no_other_hosts_device(cluster):
    s = cluster()
    gpus = [types_pb2.DeviceMeter(device_id=f"h1-gpu{i}", kind=types_pb2.GPU, device_type="NVIDIA H200")
            for i in range(2)]
    inflated = agent_pb2.RegisterRequest(host_id="h1", devices=gpus, capacity=types_pb2.Capacity(
        resources=types_pb2.Resources(cpu_millis=64_000, memory_mb=1 << 20, disk_mb=1 << 20, gpu_mdev=64_000)))
    refused(s, s.agents.Register, inflated, INVALID, "INVALID_ARGUMENT: capacity.resources.gpu_mdev: 64000 is more "
                                                     "than the host's 2 GPUs hold (1000 a GPU)")
    register(s, "h1")
    refused(s, s.agents.Register, agent_pb2.RegisterRequest(host_id="h2", devices=gpus[1:]), INVALID,
            "INVALID_ARGUMENT: devices: 'h1-gpu1' is a GPU of host 'h1'; a device id names one device, on one host")
    register(s, "h1")   # the host itself may register its own devices again
    [h1] = s.ops.Workers(ops_pb2.WorkersRequest(), timeout=10).workers
    assert h1.capacity.resources.gpu_mdev == 2000 and len(h1.gpus) == 2


def test_splits_answers_for_every_ledger_replay_can_rebuild(cluster):
    """Three gap windows of 2³²−1 lost windows each, as a scheduler before the
    rules above took them (written here straight into the ledger), overflowed
    DeviceTotal.lost_windows (uint32): every unfiltered Splits answered UNKNOWN,
    and so did it after every restart. Replay takes such a ledger still, and
    Splits answers with the sum."""
    from scheduler.ledger.steward import open_ledger
    from scheduler.service.windows.batch import WINDOWS, Windows, windows_body

    s = cluster()
    register(s, "h1")
    s.stop()
    t, lost = time.time_ns() - 60 * SECOND, 2 ** 32 - 1
    old = Windows(["h1-gpu0"] * 3, [1, 2, 3], [t, t + SECOND, t + 2 * SECOND], [t + SECOND, t + 2 * SECOND,
                  t + 3 * SECOND], [None] * 3, ["ModelBased"] * 3, [0] * 3, [], [], [], ["SpoolOverflow"] * 3,
                  [lost] * 3)
    steward = open_ledger(s.ledger, s.steward)
    steward.append(WINDOWS, windows_body("h1", old))
    steward.close()
    s.start()
    total = _device_total(s, "h1-gpu0")
    assert total.lost_windows == 3 * lost and total.unaccounted_ns == 3 * SECOND
    assert [g.lost_windows for g in s.ops.Splits(ops_pb2.SplitsRequest(), timeout=10).gaps] == [lost] * 3


def test_a_busy_device_below_its_own_idle_floor_is_counted_and_logged(cluster):
    """The agent is trusted on its own host, but not against its own history:
    a device that drew 60 W idle for ten windows and then 5 W with a claim on
    it is counted in pool_host_windows_below_idle_floor_total and logged, and
    its floor is a gauge (OPERATIONS.md, "Security")."""
    from .conftest import free_port

    address = f"127.0.0.1:{free_port()}"
    s = cluster(metrics=address)
    register(s, "h1", gpus=1)
    feed = Feed(s, "h1")
    idle = feed.occupancy()
    t = time.time_ns() - 120 * SECOND
    feed.send(*(window(i, t + (i - 1) * SECOND, 60_000_000, "h1-gpu0", idle.version) for i in range(1, 11)))
    feed.acked(10)
    assert submit(s, "job", resources=types_pb2.Resources(gpu_mdev=500)).state == types_pb2.ADMITTED
    busy = next(o for o in iter(feed.occupancy, None) if JOB in o.devices[0].occupants)
    half = lambda uj: [(JOB, uj // 2, MODEL), ("unallocated", uj - uj // 2, MODEL)]  # noqa: E731  (divided)
    feed.send(window(11, t + 10 * SECOND, 5_000_000, "h1-gpu0", busy.version, half(5_000_000)),
              window(12, t + 11 * SECOND, 50_000_000, "h1-gpu0", busy.version, half(50_000_000)))
    feed.acked(12)
    feed.close()
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read().decode()
    assert 'pool_host_windows_below_idle_floor_total{host="h1"} 1.0' in text, "5 W is below; 50 W is not"
    assert 'pool_device_idle_floor_watts{device="h1-gpu0",host="h1"} 60.0' in text
    assert "host 'h1': window seq 11 on h1-gpu0 draws 5000000 µW while claims occupy the device" in s.log()
