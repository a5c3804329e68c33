"""PrologSlurmctld, EpilogSlurmctld and TaskEpilog (docs/SLURM.md, "The hooks").

slurmctld runs them as root with the job in its environment (SLURM_JOB_ID,
SLURM_JOB_PARTITION, ...) but without SLURM_CONF or any GPU variable, and
without arguments: `pool-slurm` with SLURM_SCRIPT_CONTEXT=prolog_slurmctld or
epilog_slurmctld set is the hook.

The prolog never refuses with a non-zero exit (Slurm would requeue the job
every ~2 min for ever): a job it may not start is requeued and held by the
prolog itself (`scontrol requeuehold`) and the hook exits 0. Only when even
that fails does it exit 1, which is Slurm's own requeue: still not a start.
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger("pool_slurm.hooks")
ADMITTED = 2   # types_pb2.ADMITTED (test_jobs holds them equal), named here: a hook starts without the protos


def _claims_for(pool, config, key: str, attempt: int | None, nodes: int, tenant: str) -> list:
    """The job's open claims: those of the attempt its AdminComment names, else any open claim of its key."""
    from pool_slurm import jobs as J
    if attempt is not None:
        found = [pool.get(c, tenant) for c in J.claim_ids(config.cluster, key, attempt, nodes)]
        if all(s is not None and s.state == ADMITTED for s in found):
            return found
    attempts: dict[int, list] = {}
    for c in pool.open_claims(f"{J.PREFIX}.{config.cluster}.{key}."):
        parsed = J.parse_claim_id(c.claim_id, config.cluster)
        # ids are per tenant: only the job's tenant's ("": not known, as from a hook older than the bridge)
        if parsed and parsed[0] == key and (c.tenant == tenant or not tenant):
            attempts.setdefault(parsed[1], []).append(c)
    return attempts[max(attempts)] if attempts else []


def _key() -> str:
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ["SLURM_JOB_ID"]


def may_start(pool, config, key: str, nodes: dict, admin_comment: str, account: str = "") -> str | None:
    """None when every claim of job `key` is admitted on exactly the nodes Slurm chose (and is then
    bound to the GPUs Slurm gave it there, RULES §10); else why it may not start. Asked by the
    prolog through the running bridge (gate.py), or by the prolog itself when the bridge is down.
    Raises PoolError when Pool cannot answer."""
    from pool_slurm import jobs as J
    attempt = J.attempt_in_comment(admin_comment, config.cluster, key)
    claims = _claims_for(pool, config, key, attempt, len(nodes), config.tenant(account))
    where = {config.worker(n) for n in nodes}
    admitted = [c for c in claims if c.state == ADMITTED]
    if claims and len(admitted) == len(claims) == len(nodes) and {c.worker for c in admitted} == where:
        for c in admitted:
            pool.bind(c, list(nodes.get(config.node(c.worker), ())))
        return None
    return ("its claims wait in Pool" if claims else "it has no claim in Pool") + \
        f" (Slurm put it on {','.join(nodes)})"


def prolog(config) -> int:
    from pool_slurm.slurm import Slurm, SlurmError
    from pool_slurm import gate
    key = job_id = _key()   # an array task by <array>_<task>: its array job's id names every task
    slurm = Slurm(config.env())
    try:
        detail = slurm.detail(job_id)
        if not any(detail.nodes.values()):
            return 0   # no GPUs on any node: not Pool's
        answer = gate.ask(config, key, detail.nodes, detail.admin_comment, detail.account)   # the bridge: fast
        if answer is None:
            answer = _ask_pool(config, key, detail)   # the bridge is down: ask Pool ourselves
        ok, why = answer
        if ok:
            return 0
        if why.startswith("UNREACHABLE") and config.on_unreachable == "open":
            _note(slurm, job_id, "pool:fail-open: Pool unreachable at start, ran without a claim")
            return 0
    except SlurmError as exc:
        why = f"Slurm could not be read ({exc})"
    log.warning("job %s not started: %s", key, why)
    try:
        slurm.requeue_hold(job_id)
    except SlurmError as exc:
        log.error("job %s: requeuehold failed (%s): exiting 1, Slurm requeues it", key, exc)
        return 1
    _note(slurm, job_id, f"pool:held at start: {why}; the bridge releases it once Pool admits it")
    return 0


def _ask_pool(config, key: str, detail) -> tuple[bool, str]:
    from pool_slurm.pool import Pool, PoolError, unreachable
    try:
        pool = Pool(config)
        try:
            why = may_start(pool, config, key, detail.nodes, detail.admin_comment, detail.account)
        finally:
            pool.close()
    except PoolError as exc:
        return False, f"UNREACHABLE: {exc}" if unreachable(exc) else \
            f"Pool could not confirm an admission ({exc})"
    return why is None, why or ""


def _note(slurm, job_id: str, text: str) -> None:
    try:
        slurm.admin_comment(job_id, text)
    except Exception as exc:   # a note that cannot be written changes no decision
        log.warning("job %s: AdminComment not written: %s", job_id, exc)


def settle(pool, config, key: str, detail, nodes: int, wait_s: float = 0) -> str | None:
    """Release job `key`'s admitted claims (a claim still pending, a start the prolog refused, stays
    queued) and give the AdminComment of their energy, None when the job has no claim. With `wait_s`,
    first wait up to that long for the figure to be final (Pool.counted_past on every claim)."""
    import time
    from pool_slurm import jobs as J
    attempt = J.attempt_in_comment(detail.admin_comment, config.cluster, key)
    if attempt is None:
        return None
    tenant = config.tenant(detail.account)
    statuses = [pool.get(c, tenant) for c in J.claim_ids(config.cluster, key, attempt, nodes)]
    statuses = [s for s in statuses if s is not None]
    statuses = [(pool.release(s.claim_id, s.tenant) or pool.get(s.claim_id, s.tenant)) if s.state == ADMITTED
                else s for s in statuses]
    statuses = [s for s in statuses if s is not None]   # released, then gone from Pool's answers
    if not statuses:
        return None
    deadline = time.monotonic() + wait_s
    while wait_s and not all(pool.counted_past(s) for s in statuses):
        if time.monotonic() >= deadline:
            log.warning("job %s: windows after its claim's release not counted within %.1f s: "
                        "its figure so far", key, wait_s)
            break
        time.sleep(0.05)
    figures = [pool.claim_energy(s) for s in statuses]
    from protos.pool.v1 import types_pb2
    return J.energy_comment(statuses[0].claim_id, types_pb2.ClaimState.Name(statuses[0].state),
                            sum(f[0] for f in figures), J.worst_grade([f[1] for f in figures]),
                            sum(f[2] for f in figures))


def epilog(config) -> int:
    """Release the job's claims and write their energy into its AdminComment (a requeued job takes it;
    a finished one took the final figure from the task epilog, or the bridge's last running figure)."""
    from pool_slurm.pool import Pool, PoolError
    from pool_slurm.slurm import Slurm, SlurmError
    key = job_id = _key()
    slurm = Slurm(config.env())
    try:
        detail = slurm.detail(job_id)
        nodes = int(os.environ.get("SLURM_JOB_NUM_NODES") or len(detail.nodes) or 1)
        pool = Pool(config)
        try:
            text = settle(pool, config, key, detail, nodes)
        finally:
            pool.close()
        if text is not None:
            log.info("job %s: %s", job_id, text)
            try:   # a requeued job takes it; a finished one does not (Slurm: "Job has already finished")
                slurm.admin_comment(job_id, text)
            except SlurmError:
                pass
    except (PoolError, SlurmError) as exc:
        log.warning("job %s epilog: %s (the bridge releases the claim on its next cycle)", job_id, exc)
    return 0


BATCH_STEP = ("", "batch", "4294967291")   # SLURM_STEP_ID of the batch step's task: 22.05 leaves it unset


def task_epilog(config) -> int:
    """TaskEpilog, run by slurmstepd as the job's user after each task, the job still RUNNING: after the
    batch script (the job's end) ask the bridge to finish the job (gate.finish). Never fails the job:
    any error is logged and EpilogSlurmctld releases the claim as before."""
    from pool_slurm import gate
    if os.environ.get("SLURM_STEP_ID", "") not in BATCH_STEP:
        return 0   # an srun step ended, not the job
    answer = gate.finish(config, _key())
    if answer is None:
        log.warning("job %s: the bridge did not answer: EpilogSlurmctld releases its claim", _key())
    elif not answer[0]:
        log.warning("job %s not finished by the bridge: %s", _key(), answer[1])
    return 0


def main(config_path=None) -> int:
    from pool_slurm.config import ConfigError, load
    context = os.environ.get("SLURM_SCRIPT_CONTEXT", "")
    logging.basicConfig(level=logging.INFO, format=f"pool-slurm {context}: %(message)s", stream=sys.stderr)
    try:
        config = load(config_path)
    except ConfigError as exc:
        log.error("%s", exc)
        if context == "prolog_slurmctld":   # fail closed: no config, no start
            from pool_slurm.slurm import Slurm
            try:
                Slurm({**os.environ}).requeue_hold(_key())
                return 0
            except Exception:
                return 1
        return 0
    if context in ("prolog_slurmctld", "epilog_task") and os.environ.get("SLURM_JOB_PARTITION", "") and not any(
            p in config.partitions for p in os.environ["SLURM_JOB_PARTITION"].split(",")):
        return 0   # not a governed partition: not Pool's
    if context == "prolog_slurmctld":
        return prolog(config)
    if context == "epilog_slurmctld":
        return epilog(config)
    if context == "epilog_task":
        try:
            return task_epilog(config)
        except Exception as exc:   # never fail the job (a failing TaskEpilog is logged by slurmstepd)
            log.error("task epilog: %s", exc)
            return 0
    log.error("SLURM_SCRIPT_CONTEXT=%r: not a hook pool-slurm knows", context)
    return 0
