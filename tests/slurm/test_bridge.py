"""Pool governs the real test cluster: each Done-when point of issue 20 on
real Slurm daemons, a real pool-scheduler and the pool-slurm bridge."""

import json
import time

from slurm_e2e import e2e
from protos.pool.v1 import claims_pb2, ops_pb2, types_pb2

wait_for = e2e.wait_for


def until_file(g, name: str) -> str:
    """A job script that runs until the test creates `name` (no sleep decides when a job ends)."""
    return f"while [ ! -e {g.dir / name} ]; do sleep 0.1; done"


def finish(g, name: str) -> None:
    (g.dir / name).touch()


def slurm_devices(g, job: str) -> list[str]:
    """The Pool device ids of the GPUs Slurm gave `job` (node's i-th GPU: device nodeN-gpui)."""
    from pool_slurm.slurm import parse_detail
    detail = parse_detail(job, g.run("scontrol", "show", "-d", "job", job).stdout)
    return sorted(f"{node}-gpu{i}" for node, idx in detail.nodes.items() for i in idx)


def test_pool_binds_a_claim_to_the_gpus_slurm_gave_its_job_moving_an_unbound_one(governed):
    """A claim submitted to Pool directly (no Slurm job) holds node1-gpu0 in Pool only. A job's claim
    then gets node1-gpu1 from Pool, Slurm gives the job GPU 0: the bind moves the unbound claim."""
    g = governed()
    outside = g.scheduler.claims.Submit(claims_pb2.SubmitRequest(
        claim_id="outside", tenant="beta", estimate_uj=10**9, resources=types_pb2.Resources(gpu_mdev=1000)),
        timeout=10)
    assert outside.worker == "node1" and list(outside.devices_mdev) == ["node1-gpu0"]
    job = g.sbatch("acctA", gpus=1, comment="pool:estimate=10kJ", script=until_file(g, "job"))
    g.wait_state(job, "RUNNING")
    [claim] = g.claims(job)
    assert claim.worker == "node1" and slurm_devices(g, job) == ["node1-gpu0"]
    assert claim.bound and list(claim.devices_mdev) == ["node1-gpu0"]
    moved = g.scheduler.claims.Get(claims_pb2.GetClaimRequest(claim_id="outside"), timeout=10)
    assert list(moved.devices_mdev) == ["node1-gpu1"] and not moved.bound
    explained = g.scheduler.ops.Explain(ops_pb2.ExplainRequest(claim_id=claim.claim_id), timeout=10)
    assert explained.bound and list(explained.devices_mdev) == ["node1-gpu0"]
    # Claims.Bind by hand: a device bound to the job's claim is refused; a dry run records nothing
    import grpc
    try:
        g.scheduler.claims.Bind(claims_pb2.BindRequest(claim_id="outside", device_ids=["node1-gpu0"]), timeout=10)
        raise AssertionError("bound onto a device another claim's job runs on")
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION and error.details().startswith("BIND_CONFLICT: ")
    dry = g.scheduler.claims.Bind(claims_pb2.BindRequest(claim_id="outside", device_ids=["node1-gpu5"],
                                                         dry_run=True), timeout=10)
    assert dry.bound and list(dry.devices_mdev) == ["node1-gpu5"] and dry.ledger_seq == 0
    after = g.scheduler.claims.Get(claims_pb2.GetClaimRequest(claim_id="outside"), timeout=10)
    assert list(after.devices_mdev) == ["node1-gpu1"] and not after.bound
    # only the job's batch step may end its claim (TaskEpilog), as its user or root: the kernel says who asks
    from pool_slurm import gate
    from pool_slurm.config import load
    config = load(g.config)
    assert gate.finish(config, job) == (False, f"not asked from job {job}'s batch step "
                                               f"(its parent is no slurmstepd [{job}.batch])")
    ask = (f"import json, socket; s = socket.socket(socket.AF_UNIX); s.connect({str(config.finish_socket)!r}); "
           f"s.sendall(json.dumps({{'finish': {job!r}}}).encode() + b'\\n'); print(s.makefile().readline())")
    import pwd
    import subprocess
    nobody = pwd.getpwnam("nobody").pw_uid
    asked = subprocess.run(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", ask],
                           capture_output=True, text=True, timeout=30, cwd="/")
    assert asked.stdout.strip() and json.loads(asked.stdout) == {
        "ok": False, "why": f"uid {nobody} may not end job {job} (its user's uid is 0)"}, asked.stderr
    assert g.scheduler.claims.Get(claims_pb2.GetClaimRequest(claim_id=claim.claim_id, tenant="alpha"),
                                  timeout=10).state == types_pb2.ADMITTED and g.state(job) == "RUNNING"
    finish(g, "job")


def splits_figure(g, claim) -> int:
    rows, token = [], ""
    while True:
        page = g.scheduler.ops.Splits(ops_pb2.SplitsRequest(tenant=claim.tenant, page_token=token), timeout=10)
        rows += [r for r in page.rows if r.claim_id == claim.claim_id]
        token = page.next_page_token
        if not token:
            return sum(r.uj for r in rows)


def test_a_job_runs_only_once_pool_admits_it_and_ends_with_its_joules(governed):
    """...and with the final figure of its claim: the job's TaskEpilog has the bridge release the claim
    while Slurm still has the job RUNNING, wait for the agent's windows up to the release (one split
    before the agent heard of it, closing at the release), and write the figure then."""
    g = governed(extra="final_wait_ms = 30000")
    # claim ids are per tenant: beta names a claim as the bridge will name job 1's (a fresh cluster's
    # first job); the bridge takes only the job's tenant's claims for the job's, and leaves beta's alone
    decoy = g.scheduler.claims.Submit(claims_pb2.SubmitRequest(
        claim_id="slurm.pooltest.1.0", tenant="beta", estimate_uj=10**9, resources=types_pb2.Resources(gpu_mdev=1000)),
        timeout=10)
    assert decoy.state == types_pb2.ADMITTED
    job = g.sbatch("acctA", gpus=2, comment="pool:estimate=10kJ", script=until_file(g, "a"))
    assert job == "1"
    wait_for("the job's claim", lambda: [c for c in g.claims(job) if c.tenant == "alpha"], 30)
    g.wait_state(job, "RUNNING")
    [claim] = [c for c in g.claims(job) if c.tenant == "alpha"]
    assert claim.tenant == "alpha" and claim.request.resources.gpu_mdev == 2000
    assert claim.state == types_pb2.ADMITTED and g.job(job)["NodeList"] == claim.worker
    assert claim.bound and sorted(claim.devices_mdev) == slurm_devices(g, job)   # RULES §10: Slurm's GPUs
    devices, metered = sorted(claim.devices_mdev), time.time_ns()
    g.stream(claim.worker, [(d, metered - 10**9, metered, 3_000_000, False) for d in devices])
    wait_for("the energy in AdminComment", lambda: "energy_uj=6000000 " in g.job(job).get("AdminComment", ""), 10)
    finish(g, "a")
    alpha = lambda: [c for c in g.claims(job) if c.tenant == "alpha"]   # noqa: E731
    wait_for("the claim's release at the batch script's end", lambda: [c.state for c in alpha()] == [
        types_pb2.RELEASED], 30)
    [ended] = alpha()
    assert g.state(job) == "RUNNING", "the job ended before its claim's figure was final"
    # the agent's windows of the job's last moments reach Pool after the release: one that closed at
    # the release, split by the occupancy the agent knew then (the claim's), and the next (unallocated)
    g.stream(claim.worker, [(d, metered, ended.ended_ns, 1_000_000, True) for d in devices] +
             [(d, ended.ended_ns, time.time_ns(), 500_000, False) for d in devices])
    g.wait_state(job, "COMPLETED", timeout=15)   # once they are counted, not at final_wait_ms (30 s)
    [claim, beta] = sorted(g.claims(job), key=lambda c: c.tenant)
    assert (claim.tenant, claim.state, beta.tenant, beta.state) == (
        "alpha", types_pb2.RELEASED, "beta", types_pb2.ADMITTED)
    admin = g.job(job)["AdminComment"]
    assert admin.startswith(f"pool:claim={claim.claim_id} state=RELEASED ") and "grade=HW_SHUNT" in admin, admin
    # Splits' figure, the last window's share included (Claims.Get's measured_uj stopped at the release)
    assert "energy_uj=8000000 " in admin and splits_figure(g, claim) == 8_000_000, admin
    listed = g.scheduler.json("claims", "--slurm-job", job)["claims"]   # by id: beta's namesake too
    assert sorted((c["tenant"], c["claim_id"]) for c in listed) == [("alpha", claim.claim_id), ("beta", beta.claim_id)]
    assert g.scheduler.json("claims", "--slurm-job", job + "0")["claims"] == []


def test_an_ordinary_users_job_ends_with_its_final_figure(governed):
    """TaskEpilog runs as the job's user: the bridge lets the job's own user (not root) end its claim."""
    from conftest import python_for_all
    import pwd
    import subprocess
    if python_for_all() is None:
        import pytest
        pytest.skip("no Python that user nobody may run pool_slurm with")
    g = governed()
    submitted = subprocess.run(["runuser", "-u", "nobody", "--", "sbatch", "--parsable", "--account=acctA",
                                "--gres=gpu:1", "--comment=pool:estimate=1kJ", "--output=/dev/null", "--chdir=/tmp",
                                "--wrap", "true"], capture_output=True, text=True, env=g.cluster.env(), timeout=30,
                               cwd="/")
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    g.wait_state(job, "COMPLETED")
    shown = g.job(job)
    assert shown["UserId"] == f"nobody({pwd.getpwnam('nobody').pw_uid})"
    [claim] = g.claims(job)
    # written by the bridge at the TaskEpilog's request, before the job left RUNNING: the claim RELEASED
    assert shown["AdminComment"] == f"pool:claim={claim.claim_id} state=RELEASED energy_uj=0 grade=UNSPECIFIED " \
                                    f"unaccounted_s=0", (shown["AdminComment"], g.log())


def seed_class(g, uj: int) -> None:
    """Two released claims of work class `train`, measured at `uj` each (HwShunt): jobs with
    pool:class=train then hold `uj`, graded ModelBased, and may borrow (RULES §3, §7)."""
    seeds = []
    for i in range(2):   # both open at once: each on a device of its own, metered by one window each
        request = claims_pb2.SubmitRequest(claim_id=f"seed{i}", tenant="alpha", work_class="train", estimate_uj=uj,
                                           resources=types_pb2.Resources(gpu_mdev=1000))
        seeds.append(g.scheduler.claims.Submit(request, timeout=10))
        assert seeds[-1].state == types_pb2.ADMITTED, seeds[-1]
    for status in seeds:
        g.meter(status, uj, seconds=uj // 500_000_000)   # at 500 W: within what an H200 may draw
    for status in seeds:
        wait_for("the seed's energy", lambda: g.scheduler.claims.Get(
            claims_pb2.GetClaimRequest(claim_id=status.claim_id), timeout=10).measured_uj == uj)
        g.scheduler.claims.Release(claims_pb2.ReleaseRequest(claim_id=status.claim_id), timeout=10)


def test_jobs_within_guarantee_start_and_one_over_budget_waits_until_another_tenants_job_ends(governed):
    g = governed()
    seed_class(g, 10_000_000_000)
    a1 = g.sbatch("acctA", gpus=8, comment="pool:class=train", script=until_file(g, "a1"))
    b1 = g.sbatch("acctB", gpus=8, comment="pool:class=train", script=until_file(g, "b1"))
    g.wait_state(a1, "RUNNING")
    g.wait_state(b1, "RUNNING")
    assert {g.claims(a1)[0].tenant, g.claims(b1)[0].tenant} == {"alpha", "beta"}
    a2 = g.sbatch("acctA", gpus=1, comment="pool:class=train", script=until_file(g, "a2"))
    wait_for("Pool's reason on the waiting job",
             lambda: "pending=DEVICES_ENTITLEMENT" in g.job(a2).get("AdminComment", ""), 30)
    assert g.state(a2) == "PENDING" and g.job(a2)["Reason"].startswith("JobHeld")
    assert "over its tenant's GPU guarantee" in g.job(a2)["AdminComment"]
    # squeue: the reason column stays Slurm's (JobHeldAdmin); Pool's reason follows the user's own
    # comment, which Pool still reads, in %k: the format docs/SLURM.md gives for SQUEUE_FORMAT
    fmt = "%.18i %.2t %R %k"
    wait_for("Pool's reason in squeue", lambda: "#pool: pending=DEVICES_ENTITLEMENT" in g.squeue(a2, SQUEUE_FORMAT=fmt))
    job_id, state, reason, comment = g.squeue(a2, SQUEUE_FORMAT=fmt).split(" ", 3)
    assert (job_id, state) == (a2, "PD") and reason in ("(JobHeldAdmin)", "(JobHeldUser)"), reason
    assert comment == ("pool:class=train #pool: pending=DEVICES_ENTITLEMENT (over its tenant's GPU guarantee (and "
                       "what it may borrow))")
    finish(g, "b1")
    g.wait_state(a2, "RUNNING")
    [claim] = g.claims(a2)
    assert g.squeue(a2, SQUEUE_FORMAT="%k") == f"pool:class=train #pool: admitted on {claim.worker}"
    assert claim.state == types_pb2.ADMITTED and claim.borrowed
    for name in ("a1", "a2"):
        finish(g, name)
    for job in (a1, a2, b1):
        g.wait_state(job, "COMPLETED")


def test_a_preempted_job_is_requeued_held_and_finishes_after_the_higher_priority_one(governed):
    g = governed()
    low = g.sbatch("acctA", gpus=8, comment="pool:estimate=10kJ", script=until_file(g, "low"))
    g.wait_state(low, "RUNNING")
    high = g.sbatch("acctA", gpus=4, comment="pool:estimate=10kJ pool:priority=5", script=until_file(g, "high"))
    wait_for("the low job's claim to be preempted", lambda: g.claims(low)[0].state == types_pb2.PREEMPTED, 30)
    g.wait_state(high, "RUNNING")
    wait_for("the low job to be requeued and held", lambda: g.state(low) == "PENDING", 30)
    shown = g.job(low)
    assert int(shown["Restarts"]) >= 1 and shown["Reason"] in ("job_requeued_in_held_state", "JobHeldAdmin",
                                                                "JobHeldUser"), shown
    finish(g, "high")
    g.wait_state(low, "RUNNING")
    attempts = g.claims(low)
    assert [c.state for c in attempts] == [types_pb2.PREEMPTED, types_pb2.ADMITTED], attempts
    finish(g, "low")
    g.wait_state(low, "COMPLETED")
    g.wait_state(high, "COMPLETED")


def test_an_idle_job_is_reclaimed_and_requeued(governed):
    g = governed()
    idle = g.sbatch("acctB", gpus=1, comment="pool:estimate=10kJ", script=until_file(g, "idle"))
    g.wait_state(idle, "RUNNING")
    [claim] = g.claims(idle)
    g.meter(claim, 0, seconds=2)   # 0 µJ over 2 s, HwShunt: below the 50 W threshold, Idle (RULES §8)
    wait_for("the idle verdict", lambda: list(g.scheduler.ops.ReclamationOrder(
        ops_pb2.ReclamationOrderRequest(), timeout=10).order) == [claim.claim_id], 20)
    g.scheduler.ops.Reclaim(ops_pb2.ReclaimRequest(), timeout=10)
    wait_for("the job to leave RUNNING", lambda: g.state(idle) != "RUNNING", 10)
    assert g.claims(idle)[0].state == types_pb2.RECLAIMED
    wait_for("the job to be requeued", lambda: int(g.job(idle).get("Restarts", 0)) >= 1, 20)
    finish(g, "idle")


def test_a_two_node_job_starts_all_or_nothing(governed):
    g = governed()
    blocker = g.sbatch("acctB", gpus=8, comment="pool:estimate=10kJ", script=until_file(g, "blocker"))
    g.wait_state(blocker, "RUNNING")
    gang = g.sbatch("acctA", gpus=2, comment="pool:estimate=10kJ", nodes=2, script=until_file(g, "gang"))
    wait_for("the gang's two claims", lambda: len(g.claims(gang)) == 2, 30)
    wait_for("Pool's reason on the gang", lambda: "pending=" in g.job(gang).get("AdminComment", ""), 30)
    assert all(c.state == types_pb2.PENDING for c in g.claims(gang)) and g.state(gang) == "PENDING"
    finish(g, "blocker")
    g.wait_state(gang, "RUNNING")
    members = g.claims(gang)
    assert [c.state for c in members] == [types_pb2.ADMITTED] * 2
    assert sorted(c.worker for c in members) == ["node1", "node2"] and g.job(gang)["NodeList"] == "node[1-2]"
    finish(g, "gang")
    g.wait_state(gang, "COMPLETED")


def test_a_job_released_by_hand_without_admission_is_held_again(governed):
    g = governed()
    full = g.sbatch("acctA", gpus=8, comment="pool:estimate=10kJ", script=until_file(g, "full"))
    g.wait_state(full, "RUNNING")
    waiting = g.sbatch("acctA", gpus=1, comment="pool:estimate=10kJ", script=until_file(g, "waiting"))
    wait_for("the waiting job's claim", lambda: g.claims(waiting), 30)
    seen = set()

    def held_again() -> bool:
        shown = g.job(waiting)
        seen.add(shown["JobState"])
        return shown["JobState"] == "PENDING" and shown["Priority"] == "0" and (
            "held again by Pool" in shown.get("AdminComment", "") or int(shown.get("Restarts", 0)) >= 1)
    wake = g.cluster.dir / "wake"   # job_submit.lua touches it for each job it holds and each release
    touched = wake.stat().st_mtime_ns
    g.run("scontrol", "release", waiting)
    assert wake.stat().st_mtime_ns != touched
    # the release wakes the bridge (job_submit.lua), which holds it again; should slurmctld's next pass
    # (within a second) come first, the prolog requeues and holds it: not RUNNING either way
    wait_for("the job to be held again", held_again, 20)
    assert "RUNNING" not in seen and g.claims(waiting)[0].state == types_pb2.PENDING
    # with the bridge down, the prolog is the gate: Slurm starts it, the prolog requeues and holds it
    g.stop_bridge(kill=True)
    g.run("scontrol", "release", waiting)
    restarts = int(g.job(waiting).get("Restarts", 0))

    def requeued() -> bool:
        shown = g.job(waiting)
        seen.add(shown["JobState"])
        return int(shown.get("Restarts", 0)) > restarts and shown["JobState"] == "PENDING"
    wait_for("the prolog to requeue and hold it", requeued, 30)
    assert "RUNNING" not in seen and "pool:held at start" in g.job(waiting)["AdminComment"]
    finish(g, "full")
    g.start_bridge()
    g.wait_state(waiting, "RUNNING")
    finish(g, "waiting")
