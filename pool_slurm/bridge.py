"""The bridge daemon: it reconciles Slurm's jobs with Pool's claims, level-
triggered, every `poll_ms`, and at once when job_submit.lua has held a new
job or Pool has admitted one of its claims (docs/SLURM.md). Each cycle
reads both sides whole, so a bridge that was down, or a Pool that restarted,
is caught up by the next cycle with nothing remembered in between:

- a held GPU job in a governed partition with no open claim gets one (or a
  gang); a job that cannot become a claim stays held with the problem in its
  AdminComment;
- a pending job whose claims Pool admitted is pinned to Pool's workers
  (NodeList) and released; one whose claims still wait is held, with Pool's
  reason in its AdminComment (a job released by hand is held again);
- a started job with no admitted claim (Pool preempted or reclaimed it, or it
  never had one) is requeued and held, or cancelled, per the config;
- a claim whose job ended, or is gone, is released.

PrologSlurmctld (hooks.py) is the second gate: whatever this loop misses, a job
starts only when its claims are admitted where Slurm put it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import defaultdict

from protos.pool.v1 import claims_pb2, types_pb2

from pool_slurm import jobs as J
from pool_slurm.config import Config
from pool_slurm.pool import Pool, PoolError, unreachable
from pool_slurm.slurm import STARTED, Slurm, SlurmError

log = logging.getLogger("pool_slurm.bridge")

ADMITTED, PENDING = types_pb2.ADMITTED, types_pb2.PENDING
ENDED_BY_POOL = (types_pb2.PREEMPTED, types_pb2.RECLAIMED)
FINISH_GRACE_S = 30   # how long a job the task epilog finished may stay RUNNING without its claim
WAKE_CHECK_S = 0.01   # how often the bridge looks at the wake file between cycles (a stat)
DONE = ("COMPLETING", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
        "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT")


def governed(config: Config, job: J.Job) -> bool:
    return job.wants_gpus and any(p in config.partitions for p in job.partition.split(","))


class Bridge:
    def __init__(self, config: Config, slurm: Slurm, pool: Pool) -> None:
        self.config, self.slurm, self.pool = config, slurm, pool
        self.prefix = f"{J.PREFIX}.{config.cluster}."
        self.acted: dict[str, float] = {}     # job key -> when it was last requeued/cancelled by us
        self.attempts: dict[str, int] = {}    # job key -> the attempt its next claim takes
        self.unreachable_since: float | None = None
        self.tenants: dict[str, str] = {}    # job key -> its tenant, as the last cycle read them
        self.woken = threading.Event()        # set by the Watch thread: cycle now
        self.wake_seen: int | None = None     # the wake file's mtime when this cycle began
        self.reported: set[str] = set()
        self.holds: list[str] = []
        # (AdminComment, Comment) -> the jobs to write them to this cycle (None: leave that one as it is)
        self.comments: dict[tuple[str | None, str | None], list[str]] = defaultdict(list)
        self.finishing: dict[str, float] = {}   # job key -> when its task epilog asked to finish it
        self.writing = threading.Lock()          # `finishing`, and a finishing job's final figure vs this cycle's comments

    # -- one cycle -----------------------------------------------------------------

    def cycle(self) -> None:
        try:
            self._cycle()
        finally:
            self._flush()

    def _cycle(self) -> None:
        slurm_jobs = [j for j in self.slurm.jobs() if governed(self.config, j)]
        try:
            claims = self.pool.open_claims(self.prefix)
            workers = self.pool.workers()
        except PoolError as exc:
            if not unreachable(exc):
                raise
            self._unreachable(slurm_jobs, exc)
            return
        self.unreachable_since = None
        # job key -> tenant -> attempt -> claims. Claim ids are per tenant (RULES §11): another tenant's
        # claim named like one of the bridge's is never taken for a job's, only the job's tenant's are
        by_job: dict[str, dict[str, dict[int, list[claims_pb2.ClaimStatus]]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(list)))
        for c in claims:
            parsed = J.parse_claim_id(c.claim_id, self.config.cluster)
            if parsed is not None:
                by_job[parsed[0]][c.tenant][parsed[1]].append(c)
        known = {j.key for j in slurm_jobs}
        now, ended = time.monotonic(), {j.key for j in slurm_jobs if j.state not in STARTED}
        with self.writing:   # the finish thread adds to it meanwhile
            for key in [k for k, t in self.finishing.items() if now - t >= FINISH_GRACE_S or k in ended]:
                del self.finishing[key]
        self.tenants = {j.key: self.config.tenant(j.account) for j in slurm_jobs}
        mapped = {a.tenant for a in self.config.accounts.values()}
        for key, tenants in by_job.items():
            if key not in known:   # its job is gone (cancelled while we were away, or purged)
                for tenant, attempts in tenants.items():
                    for members in attempts.values() if tenant in mapped else ():
                        self._release(key, members, "its job is gone")
        max_gpus = max((len(w.gpus) or w.capacity.resources.gpu_mdev // J.MDEV_PER_GPU for w in workers),
                       default=None)
        submits: list[tuple[J.Job, list[claims_pb2.SubmitRequest]]] = []
        for job in slurm_jobs:
            attempts = by_job.get(job.key, {}).get(self.config.tenant(job.account), {})
            current = attempts[max(attempts)] if attempts else []
            for stale in sorted(attempts)[:-1]:   # an older attempt still open: ours, superseded
                self._release(job.key, attempts[stale], "superseded by a later attempt")
            try:
                if job.state == "PENDING":
                    self._pending(job, current, max_gpus, submits)
                elif job.state in STARTED:
                    self._started(job, current)
                elif job.state in DONE and current:
                    # COMPLETING is also a requeue on its way (the prolog's or ours): what never ran keeps
                    # its place in Pool's queue, as EpilogSlurmctld leaves it
                    ended = [c for c in current if c.state == ADMITTED] if job.state == "COMPLETING" else current
                    self._release(job.key, ended, f"its job is {job.state}")
            except (SlurmError, PoolError) as exc:
                log.warning("job %s: %s", job.key, exc)
        if submits:
            self._submit(submits)

    # -- pending jobs ----------------------------------------------------------------

    def _pending(self, job: J.Job, current: list, max_gpus: int | None, submits: list) -> None:
        want = J.ask(job, self.config.accounts, max_gpus)
        if isinstance(want, J.Problem):
            self._hold(job)
            self._comment(job, J.problem_comment(want))
            return
        if not current:
            self._hold(job)
            attempt = self._next_attempt(job)
            submits.append((job, self._requests(job, want, attempt)))
            return
        admitted = [c for c in current if c.state == ADMITTED]
        if len(admitted) == want.nodes:
            nodes = [self.config.node(c.worker) for c in sorted(admitted, key=lambda c: c.claim_id)]
            if job.required_nodes != ",".join(nodes) or job.held:
                self._start(job, admitted, J.parse_claim_id(admitted[0].claim_id, self.config.cluster)[1])
            return
        waiting = next(c for c in sorted(current, key=lambda c: c.claim_id) if c.state != ADMITTED)
        attempt = J.parse_claim_id(waiting.claim_id, self.config.cluster)[1]
        text = J.pending_comment(attempt, types_pb2.Reason.Name(waiting.reason))
        if not job.held:
            self._hold(job)
            text = "held again by Pool (released without an admitted claim); " + text
        self._comment(job, text)

    def _start(self, job: J.Job, admitted: list, attempt: int) -> None:
        """Pin a job to the workers Pool admitted its claims on, and release it."""
        nodes = [self.config.node(c.worker) for c in sorted(admitted, key=lambda c: c.claim_id)]
        text = J.admitted_comment(attempt, nodes)
        self.slurm.pin(job.key, nodes, AdminComment=text, Comment=J.status_comment(job.comment, text))
        if job.key in self.holds:   # a hold this cycle meant to write: no longer wanted
            self.holds.remove(job.key)
        if job.held:
            self.slurm.release(job.key)

    def _next_attempt(self, job: J.Job) -> int:
        last = J.attempt_in_comment(job.admin_comment, self.config.cluster, job.key)
        attempt = last + 1 if last is not None else 0
        return max(attempt, self.attempts.get(job.key, 0))

    def _requests(self, job: J.Job, want: J.Ask, attempt: int) -> list[claims_pb2.SubmitRequest]:
        ids = J.claim_ids(self.config.cluster, job.key, attempt, want.nodes)
        gpu_types = [self.config.gpu_types[want.gpu_type]] if want.gpu_type in self.config.gpu_types else []
        resources = types_pb2.Resources(gpu_mdev=want.gpu_mdev, gpu_types=gpu_types)
        gang = J.claim_base(self.config.cluster, job.key, attempt) if want.nodes > 1 else ""
        placement = types_pb2.PLACEMENT_EXCLUSIVE if want.nodes > 1 else types_pb2.PLACEMENT_SHARED
        return [claims_pb2.SubmitRequest(claim_id=i, tenant=want.tenant, gang_id=gang,
                                         gang_size=want.nodes if gang else 0, resources=resources,
                                         placement=placement, estimate_uj=want.estimate_uj,
                                         work_class=want.work_class, priority=want.priority) for i in ids]

    def _submit(self, submits: list[tuple[J.Job, list[claims_pb2.SubmitRequest]]]) -> None:
        flat = [r for _, requests in submits for r in requests]
        results = self.pool.submit_many(flat)
        at = 0
        for job, requests in submits:
            mine, at = results[at:at + len(requests)], at + len(requests)
            refused = [r.refused for r in mine if r.WhichOneof("result") == "refused"]
            settled = [r.status for r in mine if r.WhichOneof("result") == "status"
                       and r.status.state not in (PENDING, ADMITTED)]
            parsed = J.parse_claim_id(requests[0].claim_id, self.config.cluster)
            try:
                if refused:
                    code = types_pb2.ErrorCode.Name(refused[0].code)
                    self._comment(job, J.problem_comment(J.Problem(code, refused[0].message)))
                elif settled:   # an earlier attempt's id, settled: the next cycle takes the next attempt
                    self.attempts[job.key] = parsed[1] + 1
                elif all(r.status.state == ADMITTED for r in mine):   # admitted at once: start it now
                    self._start(job, [r.status for r in mine], parsed[1])
                else:
                    status = next(r.status for r in mine if r.status.state != ADMITTED)
                    self._comment(job, J.pending_comment(parsed[1], types_pb2.Reason.Name(status.reason)))
            except SlurmError as exc:
                log.warning("job %s: %s", job.key, exc)

    # -- started jobs -----------------------------------------------------------------

    def _started(self, job: J.Job, current: list) -> None:
        if time.monotonic() - self.finishing.get(job.key, -1e9) < FINISH_GRACE_S:
            return   # its batch script ended and its claim is released: Slurm is completing it
        if current and all(c.state == ADMITTED for c in current):
            self._energy(job, current)
            return
        if time.monotonic() - self.acted.get(job.key, -1e9) < 5:
            return   # already requeued or cancelled: Slurm is taking it down
        attempt = J.attempt_in_comment(job.admin_comment, self.config.cluster, job.key)
        last = J.claim_ids(self.config.cluster, job.key, attempt, job.node_count)[0] if attempt is not None else None
        ended = self.pool.get(last, self.config.tenant(job.account)) if last else None
        if ended is not None and ended.state in ENDED_BY_POOL:
            how = types_pb2.ClaimState.Name(ended.state)
            policy = self.config.on_preempt
        else:
            how, policy = "running without an admitted claim", self.config.running_without_claim
        if policy == "report":
            if job.key not in self.reported:
                log.error("job %s is %s with no admitted claim (policy: report)", job.key, job.state)
                self.reported.add(job.key)
            return
        log.info("job %s: claim %s %s: %s", job.key, last, how, policy)
        self.acted[job.key] = time.monotonic()
        if policy == "cancel":
            self.slurm.cancel(job.key)
        else:
            self.slurm.requeue_hold(job.key)

    def _energy(self, job: J.Job, current: list) -> None:
        """Keep a running job's AdminComment at its claims' energy: Slurm 22.05 refuses any update
        of a finished job ("Job has already finished"), so the figure a job ends with is the last
        one written while it ran (docs/SLURM.md, "Joules on every job")."""
        measured = sum(c.measured_uj for c in current)
        shown = J.energy_in_comment(job.admin_comment)
        if shown is not None and shown == measured and "state=ADMITTED" in job.admin_comment:
            return
        first = min(current, key=lambda c: c.claim_id)
        uj, grades, gaps = 0, [], 0
        for c in current:
            figure = self.pool.claim_energy(c)
            uj, gaps = uj + figure[0], gaps + figure[2]
            grades.append(figure[1])
        self._comment(job, J.energy_comment(first.claim_id, "ADMITTED", uj, J.worst_grade(grades), gaps),
                      status=False)

    # -- finishing jobs (TaskEpilog, gate.Finisher) -------------------------------------

    def finish(self, key: str, uid: int, batch_of: str | None) -> tuple[bool, str]:
        """Job `key`'s batch script has ended (its TaskEpilog asks, as process `uid` whose parent is
        slurmstepd's batch step of job `batch_of`) while Slurm still has it RUNNING: release its claims,
        wait up to `final_wait_ms` for their figure to be final, and write it into its AdminComment,
        the last update Slurm takes (docs/SLURM.md, "Joules on every job")."""
        from pool_slurm.hooks import settle
        detail = self.slurm.detail(key)
        if uid not in (0, os.getuid(), detail.uid):
            return False, f"uid {uid} may not end job {key} (its user's uid is {detail.uid})"
        if batch_of is None or batch_of != detail.job_id:
            return False, f"not asked from job {key}'s batch step (its parent is no slurmstepd [{detail.job_id}.batch])"
        if detail.state not in STARTED:
            return False, f"job {key} is {detail.state or 'unknown to Slurm'}"
        with self.writing:
            self.finishing[key] = time.monotonic()
        text = None
        try:
            text = settle(self.pool, self.config, key, detail, len(detail.nodes) or 1,
                          self.config.final_wait_ms / 1000)
        finally:
            if text is None:   # nothing settled (or it failed): the job stays the bridge's to watch, as before
                with self.writing:
                    self.finishing.pop(key, None)
        if text is None:
            return False, f"job {key} has no claim of Pool's"
        with self.writing:
            self.slurm.admin_comment(key, text)
        return True, text

    # -- helpers ---------------------------------------------------------------------

    def _release(self, key: str, members: list, why: str) -> None:
        for c in members:
            if self.pool.release(c.claim_id, c.tenant) is not None:
                log.info("claim %s released: %s", c.claim_id, why)

    def _hold(self, job: J.Job) -> None:
        if not job.held:
            self.holds.append(job.key)

    def _comment(self, job: J.Job, text: str, status: bool = True) -> None:
        """Write `text` into the job's AdminComment and, with `status`, show it after the user's
        own text in its Comment too, where squeue shows it (%k)."""
        admin = text if job.admin_comment != text else None
        comment = J.status_comment(job.comment, text) if status else job.comment
        comment = comment if comment != job.comment else None
        if admin is not None or comment is not None:
            self.comments[(admin, comment)].append(job.key)

    def _flush(self) -> None:
        """Holds and comments of this cycle, many jobs per scontrol call: what keeps a cycle
        over a 1,000-task array to a few commands instead of one per task."""
        holds, comments = self.holds, self.comments
        self.holds, self.comments = [], defaultdict(list)

        def writer(admin: str | None, comment: str | None):
            fields = {name: value for name, value in (("AdminComment", admin), ("Comment", comment))
                      if value is not None}
            return lambda key: self.slurm.update(key, **fields)
        with self.writing:   # no figure of this cycle over the final one a finishing job took
            comments = {texts: [k for k in keys if k not in self.finishing] for texts, keys in comments.items()}
            self._act(holds, comments, writer)

    def _act(self, holds: list[str], comments: dict, writer) -> None:
        for keys, act in [(holds, self.slurm.hold)] + [(keys, writer(*texts)) for texts, keys in comments.items()]:
            for i in range(0, len(keys), 200):
                chunk = keys[i:i + 200]
                try:
                    act(",".join(chunk))
                except SlurmError:
                    for key in chunk:   # one finished job fails a list: the others one by one
                        try:
                            act(key)
                        except SlurmError as exc:
                            log.warning("job %s: %s", key, exc)

    def _unreachable(self, slurm_jobs: list[J.Job], exc: PoolError) -> None:
        now = time.monotonic()
        if self.unreachable_since is None:
            self.unreachable_since = now
            log.warning("Pool unreachable: %s", exc)
        waited_ms = (now - self.unreachable_since) * 1000
        fail_open = self.config.on_unreachable == "open" and waited_ms >= self.config.unreachable_after_ms
        for job in slurm_jobs:
            if job.state != "PENDING":
                continue
            try:
                if fail_open:
                    self._comment(job, "pool:fail-open: Pool unreachable, released without a claim")
                    if job.held:
                        self.slurm.release(job.key)
                else:
                    self._hold(job)
                    self._comment(job, "pool:waiting: Pool is unreachable (fail-closed); the job waits until "
                                       "pool-slurm reaches pool-scheduler again")
            except SlurmError as exc:
                log.warning("job %s: %s", job.key, exc)

    def follow(self, stop=lambda: False) -> None:
        """Pool's preemptions and reclamations as they become durable (Claims.Watch), acted on at
        once instead of at the next cycle; the cycle remains the backstop (a lost stream, a
        bridge that was down). Runs in a thread of its own until `stop`."""
        while not stop():
            try:
                for event in self.pool.watch():
                    if event.kind in (claims_pb2.EVENT_PREEMPTED, claims_pb2.EVENT_RECLAIMED):
                        self._ended_by_pool(event.status)
                    elif event.kind == claims_pb2.EVENT_ADMITTED and event.status.claim_id.startswith(self.prefix):
                        self.woken.set()   # a waiting job may start: the next cycle now
                    if stop():
                        return
            except Exception as exc:   # the stream broke (Pool restarted, unreachable): watch again
                log.debug("watch: %s", exc)
            time.sleep(self.config.poll_ms / 1000)

    def _ended_by_pool(self, status: claims_pb2.ClaimStatus) -> None:
        parsed = J.parse_claim_id(status.claim_id, self.config.cluster)
        if parsed is None:
            return
        key = parsed[0]
        if status.tenant != self.tenants.get(key):   # not the claim of a job the last cycle saw: the cycle's
            return
        if time.monotonic() - self.acted.get(key, -1e9) < 5:
            return
        self.acted[key] = time.monotonic()
        how = types_pb2.ClaimState.Name(status.state)
        log.info("job %s: claim %s %s: %s", key, status.claim_id, how, self.config.on_preempt)
        try:
            if self.config.on_preempt == "cancel":
                self.slurm.cancel(key)
            else:
                self.slurm.requeue_hold(key)
        except SlurmError as exc:   # not started yet, or already gone: the cycle sorts it out
            log.info("job %s: %s", key, exc)
            self.acted.pop(key, None)

    def run(self, stop=lambda: False) -> None:
        period = self.config.poll_ms / 1000
        while not stop():
            started = time.monotonic()
            self.woken.clear()
            self.wake_seen = self._wake_mark()
            try:
                self.cycle()
            except (SlurmError, PoolError) as exc:
                log.warning("cycle: %s", exc)
            took = time.monotonic() - started
            if took > 5 * period:
                log.info("a cycle took %.1f s", took)
            self._wait(started + period, stop)

    def _wait(self, until: float, stop) -> None:
        """Until the next cycle is due, or sooner: job_submit.lua touched the wake file (a job was
        held at submission) or Pool admitted one of the bridge's claims (Claims.Watch) since the
        last cycle began. Push where Slurm and Pool can push, the poll as the backstop."""
        while not stop():
            left = until - time.monotonic()
            if left <= 0 or self.woken.wait(min(left, WAKE_CHECK_S)) or self._wake_mark() != self.wake_seen:
                return

    def _wake_mark(self) -> int | None:
        try:
            return self.config.wake.stat().st_mtime_ns
        except OSError:
            return None
