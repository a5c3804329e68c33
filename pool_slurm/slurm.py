"""Slurm's side, through its own commands (squeue, scontrol, scancel) with
SLURM_CONF set: nothing here links against Slurm. Each call is one command; a
failing command raises SlurmError with its message."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass

from pool_slurm.jobs import Job


class SlurmError(RuntimeError):
    pass


ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
          "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED")
STARTED = ("CONFIGURING", "RUNNING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING")


def _state(value) -> str:
    return value[0] if isinstance(value, list) else str(value)


def _task_ids(spec: str) -> list[int]:
    """'0-3,7,9-11%4' -> [0, 1, 2, 3, 7, 9, 10, 11]."""
    out: list[int] = []
    for part in spec.split("%")[0].split(","):
        if not part:
            continue
        step = 1
        if ":" in part:
            part, s = part.split(":")
            step = int(s)
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1, step))
        else:
            out.append(int(part))
    return out


def jobs_from_json(doc: dict) -> list[Job]:
    """squeue --json's jobs as Job records; a pending array's unsplit tasks one record each."""
    out = []
    for j in doc.get("jobs", []):
        base = dict(account=j.get("account") or "", partition=j.get("partition") or "",
                    comment=j.get("comment") or "", state=_state(j.get("job_state", "")),
                    priority=int(j.get("priority") or 0), reason=j.get("state_reason") or "",
                    tres_per_node=j.get("tres_per_node") or "", tres_per_job=j.get("tres_per_job") or "",
                    tres_per_task=j.get("tres_per_task") or "", node_count=int(j.get("node_count") or 1),
                    nodes=j.get("nodes") or "", restarts=int(j.get("restart_cnt") or 0),
                    admin_comment=j.get("admin_comment") or "",
                    required_nodes=j.get("required_nodes") or "")
        tasks = j.get("array_task_string") or ""
        task = j.get("array_task_id")
        if tasks:
            out.extend(Job(key=f"{j['array_job_id']}_{t}", **base) for t in _task_ids(tasks))
        elif isinstance(task, int) and j.get("array_job_id"):
            out.append(Job(key=f"{j['array_job_id']}_{task}", **base))
        else:
            out.append(Job(key=str(j["job_id"]), **base))
    return out


@dataclass(frozen=True)
class Detail:
    """`scontrol show -d job`: where Slurm put the job and which GPU indices per node."""

    key: str
    state: str
    nodes: dict[str, tuple[int, ...]]   # node -> GPU indices there
    admin_comment: str
    restarts: int
    account: str
    partition: str
    uid: int | None = None   # the job's user (UserId=name(uid))
    job_id: str = ""         # Slurm's own id (JobId=; an array task's differs from its key)


_FIELD = re.compile(r"(\w[\w/:]*)=(\S*)")
_IDX = re.compile(r"IDX:([0-9,\-]+)")


def expand_hosts(text: str) -> list[str]:
    """'node[1-2],gpu7' -> ['node1', 'node2', 'gpu7'] (Slurm's hostlist syntax)."""
    out, depth, token = [], 0, ""
    for ch in text + ",":
        if ch == "," and depth == 0:
            if token:
                m = re.fullmatch(r"([^\[]*)\[([^\]]+)\](.*)", token)
                if not m:
                    out.append(token)
                else:
                    prefix, ranges, suffix = m.groups()
                    for r in ranges.split(","):
                        a, _, b = r.partition("-")
                        for i in range(int(a), int(b or a) + 1):
                            out.append(f"{prefix}{str(i).zfill(len(a))}{suffix}")
            token = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        token += ch
    return out


def parse_detail(key: str, text: str) -> Detail:
    nodes: dict[str, tuple[int, ...]] = {}
    state = admin = account = partition = ""
    restarts, uid, job_id = 0, None, ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Nodes=") and "GRES=" in stripped:
            hosts = expand_hosts(stripped.split()[0].split("=", 1)[1])
            m = _IDX.search(stripped)
            idx = tuple(_task_ids(m.group(1))) if m else ()
            for host in hosts:
                nodes[host] = idx
        elif stripped.startswith("AdminComment="):
            admin = stripped.split("=", 1)[1]
        else:
            for name, value in _FIELD.findall(stripped):
                if name == "JobState":
                    state = value
                elif name == "Restarts":
                    restarts = int(value)
                elif name == "Account":
                    account = value
                elif name == "Partition":
                    partition = value
                elif name == "JobId" and not job_id:
                    job_id = value
                elif name == "UserId" and (m := re.search(r"\((\d+)\)$", value)):
                    uid = int(m.group(1))
                elif name == "NodeList" and value not in ("(null)", "") and not nodes:
                    for host in expand_hosts(value):
                        nodes.setdefault(host, ())
    return Detail(key, state, nodes, admin, restarts, account, partition, uid, job_id)


class Slurm:
    def __init__(self, env: dict[str, str], timeout_s: float = 10) -> None:
        self.env, self.timeout_s = env, timeout_s

    def _run(self, *command: str) -> str:
        try:
            done = subprocess.run(list(command), capture_output=True, text=True, env=self.env,
                                  timeout=self.timeout_s, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SlurmError(f"{command[0]}: {exc}") from None
        if done.returncode != 0:
            raise SlurmError(f"{' '.join(command[:3])}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def jobs(self) -> list[Job]:
        return jobs_from_json(json.loads(self._run("squeue", "--json")))

    def detail(self, key: str) -> Detail:
        return parse_detail(key, self._run("scontrol", "show", "-d", "job", key))

    def hold(self, key: str) -> None:
        self._run("scontrol", "hold", key)

    def release(self, key: str) -> None:
        self._run("scontrol", "release", key)

    def pin(self, key: str, nodes: list[str], **fields: str) -> None:
        """Run only on `nodes`, and now (a requeued job's EligibleTime is pushed ~2 min ahead);
        `fields` (AdminComment=, Comment=) in the same update."""
        self.update(key, NodeList=",".join(nodes), StartTime="now", **fields)

    def update(self, key: str, **fields: str) -> None:
        """One `scontrol update` of a job, or of a comma-separated list of jobs."""
        self._run("scontrol", "update", f"jobid={key}", *(f"{name}={value}" for name, value in fields.items()))

    def requeue_hold(self, key: str) -> None:
        self._run("scontrol", "requeuehold", key)

    def cancel(self, key: str) -> None:
        self._run("scancel", key)

    def admin_comment(self, key: str, text: str) -> None:
        self._run("scontrol", "update", f"jobid={key}", f"AdminComment={text}")
