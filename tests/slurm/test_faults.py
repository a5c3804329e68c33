"""Faults on the real Slurm (issue 20, item 5): bad input held with a reason
that says what to fix; the bridge or pool-scheduler killed mid-run; Pool
unreachable, fail-closed by default and fail-open by option. Throughout, no
job starts without an admitted claim."""

from slurm_e2e import e2e
from protos.pool.v1 import claims_pb2, types_pb2

wait_for = e2e.wait_for


def until_file(g, name: str) -> str:
    return f"while [ ! -e {g.dir / name} ]; do sleep 0.1; done"


def finish(g, name: str) -> None:
    (g.dir / name).touch()


def watch_states(g, job: str, seen: set):
    def state() -> str:
        shown = g.state(job)
        seen.add(shown)
        return shown
    return state


def test_jobs_that_cannot_become_claims_are_held_saying_what_to_fix_then_run_once_fixed(governed):
    g = governed()
    unknown = g.sbatch("physics", gpus=1, comment="pool:estimate=1kJ", script="true")
    garbled = g.sbatch("acctA", gpus=1, comment="pool:estimate=lots", script="true")
    silent = g.sbatch("acctA", gpus=1, comment="", script="true")
    expected = {unknown: ("UNKNOWN_ACCOUNT", "--account"), garbled: ("BAD_COMMENT", "pool:estimate=50kJ"),
                silent: ("NO_ESTIMATE", "pool:estimate=")}
    for job, (code, fix) in expected.items():
        wait_for(f"job {job}'s problem", lambda: f"pool:held {code}:" in g.job(job).get("AdminComment", ""), 30)
        assert fix in g.job(job)["AdminComment"] and g.state(job) == "PENDING" and not g.claims(job)
        assert f"#pool: held {code}: " in g.squeue(job, SQUEUE_FORMAT="%k")
    # more GPUs per node than any Pool worker has: Slurm refuses more than its nodes declare at sbatch,
    # so Pool's workers declare fewer here (4) than Slurm's nodes (8)
    for node in ("node1", "node2"):
        g.scheduler.register(node, gpus=4)
    wide = g.sbatch("acctA", gpus=6, comment="pool:estimate=1kJ", script="true")
    wait_for("the wide job's problem", lambda: "pool:held TOO_MANY_GPUS:" in g.job(wide).get("AdminComment", ""), 30)
    assert "ask at most 4 per node" in g.job(wide)["AdminComment"] and g.state(wide) == "PENDING"
    assert not g.claims(wide)
    g.run("scancel", wide)
    for node in ("node1", "node2"):
        g.scheduler.register(node, gpus=8)
    # the operator maps the account (Slurm ignores Account= updates without an accounting database)
    g.stop_bridge()
    g.config.write_text(g.config.read_text() + '\n[accounts.physics]\ntenant = "beta"\n')
    g.start_bridge()
    g.run("scontrol", "update", f"jobid={garbled}", "Comment=pool:estimate=2kJ")
    for job in (unknown, garbled):
        g.wait_state(job, "COMPLETED")
        assert g.claims(job)[0].state == types_pb2.RELEASED
    assert g.state(silent) == "PENDING"   # still held, never dropped


def test_killing_the_bridge_then_the_scheduler_starts_nothing_unadmitted_and_restarts_reconcile(governed):
    g = governed()
    running = g.sbatch("acctA", gpus=8, comment="pool:estimate=10kJ", script=until_file(g, "running"))
    g.wait_state(running, "RUNNING")
    victim = g.sbatch("acctB", gpus=1, comment="pool:estimate=10kJ", script=until_file(g, "victim"))
    g.wait_state(victim, "RUNNING")
    waiting = g.sbatch("acctA", gpus=1, comment="pool:estimate=10kJ", script=until_file(g, "waiting"))
    wait_for("the waiting job's claim", lambda: g.claims(waiting), 30)
    assert g.claims(waiting)[0].state == types_pb2.PENDING   # alpha's 8 GPUs are in use

    # -- the bridge killed -------------------------------------------------------------
    g.stop_bridge(kill=True)
    orphan = g.scheduler.claims.Submit(claims_pb2.SubmitRequest(   # a claim whose job is gone
        claim_id="slurm.pooltest.99999.0", tenant="beta", estimate_uj=10**9,
        resources=types_pb2.Resources(gpu_mdev=1000)), timeout=10)
    assert orphan.state == types_pb2.ADMITTED
    [victim_claim] = g.claims(victim)   # its claim released behind the job's back: it runs with none
    g.scheduler.claims.Release(claims_pb2.ReleaseRequest(claim_id=victim_claim.claim_id), timeout=10)
    seen: set = set()
    state = watch_states(g, waiting, seen)
    g.run("scontrol", "release", waiting)   # by hand: the prolog is the gate while the bridge is down
    wait_for("the prolog to requeue and hold it", lambda: state() == "PENDING" and int(
        g.job(waiting).get("Restarts", 0)) >= 1, 30)
    finish(g, "running")   # alpha's GPUs free while the bridge is down: Pool admits the waiting claim
    wait_for("Pool to admit the waiting job's claim",
             lambda: [c.state for c in g.claims(waiting)][-1:] == [types_pb2.ADMITTED], 30)
    assert state() == "PENDING" and "RUNNING" not in seen   # admitted, but the bridge is down: not started
    g.start_bridge()
    wait_for("the orphan claim's release", lambda: g.scheduler.claims.Get(
        claims_pb2.GetClaimRequest(claim_id=orphan.claim_id), timeout=10).state == types_pb2.RELEASED, 30)
    g.wait_state(waiting, "RUNNING")   # admitted, not started: goes on
    wait_for("the job running with no claim to be requeued and held", lambda: int(
        g.job(victim).get("Restarts", 0)) >= 1, 30)
    assert g.claims(waiting)[-1].state == types_pb2.ADMITTED

    # -- pool-scheduler killed ------------------------------------------------------------
    g.scheduler.kill()
    late = g.sbatch("acctB", gpus=1, comment="pool:estimate=10kJ", script=until_file(g, "late"))
    wait_for("the reason on a job submitted while Pool is down",
             lambda: "Pool is unreachable" in g.job(late).get("AdminComment", ""), 30)
    late_seen: set = set()
    late_state = watch_states(g, late, late_seen)
    g.run("scontrol", "release", late)   # by hand: held again by the bridge, or stopped by the prolog
    assert g.job(late)["Priority"] != "0"
    wait_for("the job to be held again", lambda: late_state() == "PENDING" and g.job(late)["Priority"] == "0", 30)
    assert "RUNNING" not in late_seen
    g.scheduler.start()
    g.wait_state(late, "RUNNING")
    assert g.claims(late)[-1].state == types_pb2.ADMITTED
    for name in ("victim", "waiting", "late"):
        finish(g, name)
    for job in (running, waiting, late):
        g.wait_state(job, "COMPLETED")


def test_with_fail_open_a_job_runs_while_pool_is_unreachable_and_says_so(governed):
    # timeout_s: how long each call waits for an answer before Pool counts as unreachable
    g = governed(extra='on_unreachable = "open"\nunreachable_after_ms = 500', pool_extra="timeout_s = 1")
    g.scheduler.kill()
    job = g.sbatch("acctA", gpus=1, comment="pool:estimate=10kJ", script="true")
    g.wait_state(job, "COMPLETED")
    assert "pool:fail-open" in g.job(job)["AdminComment"]
