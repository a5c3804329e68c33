"""Pool governs the real test cluster: each Done-when point of issue 20 on
real Slurm daemons, a real pool-scheduler and the pool-slurm bridge."""

from conftest import e2e
from protos.pool.v1 import claims_pb2, ops_pb2, types_pb2

wait_for = e2e.wait_for


def until_file(g, name: str) -> str:
    """A job script that runs until the test creates `name` (no sleep decides when a job ends)."""
    return f"while [ ! -e {g.dir / name} ]; do sleep 0.1; done"


def finish(g, name: str) -> None:
    (g.dir / name).touch()


def splits_figure(g, claim) -> int:
    rows, token = [], ""
    while True:
        page = g.scheduler.ops.Splits(ops_pb2.SplitsRequest(tenant=claim.tenant, page_token=token), timeout=10)
        rows += [r for r in page.rows if r.claim_id == claim.claim_id]
        token = page.next_page_token
        if not token:
            return sum(r.uj for r in rows)


def test_a_job_runs_only_once_pool_admits_it_and_ends_with_its_joules(governed):
    g = governed()
    job = g.sbatch("acctA", gpus=2, comment="pool:estimate=10kJ", script=until_file(g, "a"))
    wait_for("the job's claim", lambda: g.claims(job), 30)
    g.wait_state(job, "RUNNING")
    [claim] = g.claims(job)
    assert claim.tenant == "alpha" and claim.request.resources.gpu_mdev == 2000
    assert claim.state == types_pb2.ADMITTED and g.job(job)["NodeList"] == claim.worker
    g.meter(claim, 3_000_000)
    wait_for("the energy in AdminComment", lambda: "energy_uj=6000000 " in g.job(job).get("AdminComment", ""), 10)
    finish(g, "a")
    g.wait_state(job, "COMPLETED")
    wait_for("the claim's release", lambda: g.claims(job)[0].state == types_pb2.RELEASED, 10)
    [claim] = g.claims(job)
    admin = g.job(job)["AdminComment"]
    assert admin.startswith(f"pool:claim={claim.claim_id} ") and "grade=HW_SHUNT" in admin, admin
    assert f"energy_uj={claim.measured_uj} " in admin and claim.measured_uj == splits_figure(g, claim) == 6_000_000
