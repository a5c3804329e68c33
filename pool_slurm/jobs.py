"""What a Slurm job asks of Pool, and what Pool's answer says on the job: pure
functions, no I/O (docs/SLURM.md, "From a job to a claim").

- A job in a governed partition that asks for GPUs becomes one claim, or a gang
  of one exclusive claim per node when it spans several nodes.
- Its tenant comes from its (lower-cased) Slurm account through `[accounts]`.
- GPUs per node come from its gres (`--gres=gpu:N`, `--gpus=N` on one node).
- Its estimate from `--comment pool:estimate=50kJ` (J, kJ, MJ, Wh, kWh, uJ), or
  its work class from `pool:class=NAME`, or the account's defaults; its
  priority from `pool:priority=N`.
- A job that cannot become a claim gets a Problem: a stable code and a sentence
  that says what to fix. The bridge keeps such a job held and writes the
  problem into its AdminComment; it never runs it or drops it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal

MDEV_PER_GPU = 1000
PREFIX = "slurm"   # claim ids: slurm.<cluster>.<job key>.<attempt>[.n<member>]



@dataclass(frozen=True, slots=True)
class Job:
    """One Slurm job (or one array task) as squeue --json shows it."""

    key: str                  # "123", or "123_7" for an array task: what scontrol takes
    account: str = ""
    partition: str = ""
    comment: str = ""
    state: str = "PENDING"    # PENDING, CONFIGURING, RUNNING, COMPLETING, COMPLETED, ...
    priority: int = 0         # 0: held
    reason: str = ""
    tres_per_node: str = ""
    tres_per_job: str = ""
    tres_per_task: str = ""
    node_count: int = 1
    nodes: str = ""
    restarts: int = 0
    admin_comment: str = ""
    required_nodes: str = ""   # ReqNodeList: where the bridge pinned it

    @property
    def held(self) -> bool:
        return self.priority == 0

    @property
    def wants_gpus(self) -> bool:
        return any("gpu" in t for t in (self.tres_per_node, self.tres_per_job, self.tres_per_task))


@dataclass(frozen=True, slots=True)
class Problem:
    """Why a job cannot become a claim, and what to fix."""

    code: str
    text: str

    def __str__(self) -> str:
        return f"{self.code}: {self.text}"


@dataclass(frozen=True, slots=True)
class Account:
    tenant: str
    estimate_uj: int | None = None
    work_class: str = ""


@dataclass(frozen=True, slots=True)
class Ask:
    """The claim (or gang) a job becomes."""

    tenant: str
    nodes: int
    gpus_per_node: int
    estimate_uj: int | None
    work_class: str
    priority: int
    gpu_type: str = ""

    @property
    def gpu_mdev(self) -> int:
        return self.gpus_per_node * MDEV_PER_GPU


@dataclass(frozen=True, slots=True)
class Comment:
    estimate_uj: int | None = None
    work_class: str = ""
    priority: int = 0
    keys: tuple[str, ...] = field(default=())


_TOKEN = re.compile(r"pool:([A-Za-z_]+)=(\S*)")
_CLASS = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_ENERGY = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([A-Za-zµ]+)")


UNITS_UJ = {"uJ": 1, "µJ": 1, "mJ": 1_000, "J": 1_000_000, "kJ": 1_000_000_000, "MJ": 1_000_000_000_000,
            "Wh": 3_600_000_000, "kWh": 3_600_000_000_000}
_UNITS_FOLDED = {**{k.lower(): v for k, v in UNITS_UJ.items() if k.lower() not in ("mj",)}}


def parse_energy(text: str) -> int:
    """'50kJ' -> 50_000_000_000 µJ. Raises ValueError naming what is wrong
    (mJ and MJ differ by case; other units are read in any case)."""
    m = _ENERGY.fullmatch(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not an energy (a number and a unit: J, kJ, MJ, Wh, kWh or uJ)")
    number, unit = m.groups()
    scale = UNITS_UJ.get(unit) or _UNITS_FOLDED.get(unit.lower())
    if scale is None:
        raise ValueError(f"{text!r}: unknown unit {unit!r} (use J, kJ, MJ, Wh, kWh or uJ)")
    uj = int(Decimal(number) * scale)
    if uj <= 0:
        raise ValueError(f"{text!r}: an estimate must be above 0")
    return uj


def parse_comment(comment: str) -> Comment | Problem:
    """The `pool:KEY=VALUE` tokens of a job's comment (other text is the user's own; the status
    the bridge appends, from STATUS_MARK on, is not read)."""
    comment = user_comment(comment)
    estimate, work_class, priority, keys = None, "", 0, []
    for key, value in _TOKEN.findall(comment or ""):
        keys.append(key)
        if key == "estimate":
            try:
                estimate = parse_energy(value)
            except ValueError as exc:
                return Problem("BAD_COMMENT", f"pool:estimate: {exc}; e.g. --comment pool:estimate=50kJ")
        elif key == "class":
            if not _CLASS.fullmatch(value):
                return Problem("BAD_COMMENT", f"pool:class={value!r} is not a work class name "
                                              "([A-Za-z0-9._:-]{1,128})")
            work_class = value
        elif key == "priority":
            try:
                priority = int(value)
            except ValueError:
                return Problem("BAD_COMMENT", f"pool:priority={value!r} is not an integer")
            if not -(2**31) <= priority < 2**31:
                return Problem("BAD_COMMENT", f"pool:priority={value} is out of range")
        else:
            return Problem("BAD_COMMENT", f"unknown key pool:{key} (known: pool:estimate=, pool:class=, "
                                          "pool:priority=)")
    if "pool:" in (comment or "") and not keys:
        return Problem("BAD_COMMENT", f"cannot read {comment!r}: write pool:estimate=50kJ, pool:class=NAME "
                                      "or pool:priority=N")
    return Comment(estimate, work_class, priority, tuple(keys))


_GRES = re.compile(r"(?:gres[:/])?gpu(?::([A-Za-z0-9_.-]+))?[:=]([0-9]+)")


def _gpus(tres: str) -> tuple[int, str] | None:
    """'gres:gpu:2' -> (2, ''); 'gres:gpu:h200:2' -> (2, 'h200'); None: no GPU in it."""
    for part in tres.split(","):
        m = _GRES.fullmatch(part.strip())
        if m:
            return int(m.group(2)), m.group(1) or ""
    return None


def ask(job: Job, accounts: dict[str, Account], max_gpus_per_node: int | None) -> Ask | Problem:
    """The claim a GPU job becomes, or why it cannot become one."""
    account = accounts.get(job.account.lower())
    if account is None:
        known = ", ".join(sorted(accounts)) or "none"
        return Problem("UNKNOWN_ACCOUNT", f"account {job.account or '(none)'!r} is not mapped to a Pool tenant "
                                          f"(mapped: {known}); submit with --account=ONE_OF_THEM or ask the "
                                          "operator to add it to [accounts] of pool-slurm's config")
    comment = parse_comment(job.comment)
    if isinstance(comment, Problem):
        return comment
    if job.tres_per_task and "gpu" in job.tres_per_task:
        return Problem("UNSUPPORTED_GPU_REQUEST", f"GPUs per task ({job.tres_per_task}) are not supported; "
                                                  "ask GPUs per node: --gres=gpu:N")
    per_node = _gpus(job.tres_per_node) if job.tres_per_node else None
    if per_node is None and job.tres_per_job and "gpu" in job.tres_per_job:
        per_job = _gpus(job.tres_per_job)
        if per_job is None or job.node_count != 1:
            return Problem("UNSUPPORTED_GPU_REQUEST", f"--gpus ({job.tres_per_job}) over {job.node_count} nodes "
                                                      "cannot be split per node; ask --gres=gpu:N per node")
        per_node = per_job
    if per_node is None:
        return Problem("UNSUPPORTED_GPU_REQUEST", f"cannot read the GPUs asked ({job.tres_per_node or job.tres_per_job}"
                                                  "); ask --gres=gpu:N")
    gpus, gpu_type = per_node
    if gpus <= 0:
        return Problem("UNSUPPORTED_GPU_REQUEST", "asks 0 GPUs; ask --gres=gpu:N with N >= 1")
    if max_gpus_per_node is not None and gpus > max_gpus_per_node:
        return Problem("TOO_MANY_GPUS", f"asks {gpus} GPUs per node, and no Pool worker has more than "
                                        f"{max_gpus_per_node}; ask at most {max_gpus_per_node} per node "
                                        "(more nodes with -N for more GPUs)")
    estimate = comment.estimate_uj if comment.estimate_uj is not None else (
        None if comment.work_class else account.estimate_uj)
    work_class = comment.work_class or ("" if comment.estimate_uj is not None else account.work_class)
    if estimate is None and not work_class:
        return Problem("NO_ESTIMATE", "Pool needs an energy estimate: add --comment pool:estimate=50kJ "
                                      "(or pool:class=NAME), or ask the operator for a default for account "
                                      f"{job.account!r}")
    if estimate is not None and job.node_count > 1:
        estimate = -(-estimate // job.node_count)   # per member, rounded up: the gang holds at least the whole
    return Ask(account.tenant, max(job.node_count, 1), gpus, estimate, work_class, comment.priority, gpu_type)


# -- claim ids ------------------------------------------------------------------

def claim_base(cluster: str, key: str, attempt: int) -> str:
    return f"{PREFIX}.{cluster}.{key}.{attempt}"


def claim_ids(cluster: str, key: str, attempt: int, nodes: int) -> list[str]:
    base = claim_base(cluster, key, attempt)
    return [base] if nodes == 1 else [f"{base}.n{i}" for i in range(nodes)]


_ID = re.compile(r"slurm\.([^.]+)\.([0-9]+(?:_[0-9]+)?)\.([0-9]+)(?:\.n([0-9]+))?")


def parse_claim_id(claim_id: str, cluster: str) -> tuple[str, int, int | None] | None:
    """(job key, attempt, member) of a claim this cluster's bridge made, else None."""
    m = _ID.fullmatch(claim_id)
    if not m or m.group(1) != cluster:
        return None
    return m.group(2), int(m.group(3)), None if m.group(4) is None else int(m.group(4))


# -- what the job's Comment and AdminComment say -------------------------------------

# Slurm 22.05's squeue shows a pending job's reason (%R, the default format's last column) from
# slurmctld's own reason code or description, which nothing outside slurmctld can set: a held
# job shows JobHeldAdmin. So Pool's word on a waiting job also goes into the job's Comment,
# which squeue shows with %k, after the user's own text (kept as it is): "<user's text> #pool: <status>".
STATUS_MARK = "#pool: "
COMMENT_MAX = 1024   # slurmctld refuses a longer comment
_STATUS = re.compile(r"(?:^|\s)#pool: .*\Z", re.S)
_ADMIN_TOKENS = re.compile(r"pool:(?:attempt=[0-9]+ )?")


def user_comment(comment: str) -> str:
    """A job's comment without the status the bridge appended: the user's own text."""
    return _STATUS.sub("", comment or "")


def status_comment(comment: str, admin_text: str) -> str:
    """The job's comment showing `admin_text` (an AdminComment the bridge writes) as Pool's status,
    after the user's own text: `pool:estimate=1kJ #pool: pending=ENERGY_SURPLUS (over its ...)`."""
    user = user_comment(comment)
    head = f"{user} {STATUS_MARK}" if user else STATUS_MARK
    if len(head) >= COMMENT_MAX:   # no room left by the user's text: the comment stays theirs alone
        return user
    return (head + _ADMIN_TOKENS.sub("", admin_text))[:COMMENT_MAX]


REASON_TEXT = {
    "GANG_INCOMPLETE": "waiting for the other nodes' claims",
    "DEVICES_ENTITLEMENT": "over its tenant's GPU guarantee (and what it may borrow)",
    "ENERGY_OWN_PASS": "over its tenant's energy guarantee, which other claims use",
    "ESTIMATOR_MAY_NOT_BORROW": "over its tenant's guarantee, and a declared estimate may not borrow",
    "ENERGY_SURPLUS": "over its tenant's guarantee, with not enough surplus to borrow",
    "NO_ELIGIBLE_WORKER": "no room on any node Pool governs",
    "GANG_NEVER_FITS": "never fits: the gang is larger than the cluster",
    "INVALID": "refused as invalid",
}


def pending_comment(attempt: int, reason: str) -> str:
    """What a waiting job shows. The same for every job waiting for the same reason at the same
    attempt, so the bridge writes it to many jobs in one scontrol call (an array of 1,000)."""
    text = REASON_TEXT.get(reason, reason.lower().replace("_", " "))
    return f"pool:attempt={attempt} pending={reason} ({text})"


def admitted_comment(attempt: int, nodes: list[str]) -> str:
    return f"pool:attempt={attempt} admitted on {','.join(nodes)}"


def problem_comment(problem: Problem) -> str:
    return f"pool:held {problem.code}: {problem.text}"


def energy_comment(claim_id: str, state: str, uj: int, grade: str, unaccounted_s: int) -> str:
    return f"pool:claim={claim_id} state={state} energy_uj={uj} grade={grade} unaccounted_s={unaccounted_s}"


_COMMENT_CLAIM = re.compile(r"pool:claim=(\S+)")


def claim_in_comment(admin_comment: str) -> str | None:
    m = _COMMENT_CLAIM.search(admin_comment or "")
    return m.group(1) if m else None


_COMMENT_ATTEMPT = re.compile(r"pool:attempt=([0-9]+)")


def attempt_in_comment(admin_comment: str, cluster: str, key: str) -> int | None:
    """The attempt a job's AdminComment names (pool:attempt=N, or the attempt of pool:claim=ID)."""
    m = _COMMENT_ATTEMPT.search(admin_comment or "")
    if m:
        return int(m.group(1))
    claim = claim_in_comment(admin_comment)
    parsed = parse_claim_id(claim, cluster) if claim else None
    return parsed[1] if parsed and parsed[0] == key else None


_COMMENT_ENERGY = re.compile(r"energy_uj=([0-9]+)")
GRADES = ("HW_SHUNT", "MODEL_BASED", "ESTIMATOR", "UNSPECIFIED")   # best to worst; UNSPECIFIED: no figure


def energy_in_comment(admin_comment: str) -> int | None:
    m = _COMMENT_ENERGY.search(admin_comment or "")
    return int(m.group(1)) if m else None


def worst_grade(grades: list[str]) -> str:
    """The grade of a sum of figures: the worst of its parts (RULES §0); UNSPECIFIED when none had one."""
    known = [g for g in grades if g in GRADES[:3]]
    return max(known, key=GRADES.index) if known else "UNSPECIFIED"
