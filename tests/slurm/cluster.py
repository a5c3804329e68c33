"""A throwaway Slurm 22.05 cluster on loopback for tests, CI and bench/slurm.py.

One munged (as the `munge` user, its own socket and key), one slurmctld and two
slurmd (node1, node2: NodeAddr=127.0.0.1, a port each, 8 fake GPUs each whose
device files are made with mknod), all configured in one directory and torn
down from it. The facts this relies on are in docs/SLURM.md ("A test cluster")
and were observed on Debian 12's slurm-wlm:

    python tests/slurm/cluster.py start DIR   # prints SLURM_CONF=DIR/slurm.conf
    python tests/slurm/cluster.py stop DIR

Two partitions cover both nodes: `gpu` (the default, the one Pool governs in
the tests) and `open` (not governed: bench/slurm.py's "without the gate").
Hooks are optional: `prolog`/`epilog`/`task_epilog` are PrologSlurmctld/
EpilogSlurmctld/TaskEpilog commands, `job_submit` the text of a job_submit.lua written beside slurm.conf.
Needs root (slurmd runs as root, munged as `munge`).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOW = ("install Slurm and munge (Debian/Ubuntu: apt-get install slurm-wlm munge) and run as root; "
       ".ci/run does both")
NODES = ("node1", "node2")
GPUS_PER_NODE = 8
CPUS_PER_NODE = 64


def missing() -> str | None:
    """Why a cluster cannot start here, or None."""
    for tool in ("slurmctld", "slurmd", "munged", "mungekey", "sbatch", "squeue", "scontrol", "sinfo"):
        if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists():
            return f"{tool} not found: {HOW}"
    if os.geteuid() != 0:
        return f"not root: {HOW}"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return f"no munge user: {HOW}"
    return None


def _tool(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_ports(count: int) -> list[int]:
    held, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        held.append(s)
        ports.append(s.getsockname()[1])
    for s in held:
        s.close()
    return ports


class Cluster:
    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.conf = self.dir / "slurm.conf"
        self.munge = self.dir / "munge"
        self.socket = self.munge / "munge.socket"

    # -- configuration ------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """The environment a Slurm client command needs to reach this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def write(self, *, prolog: str | None = None, epilog: str | None = None,
              job_submit: str | None = None, task_epilog: str | None = None) -> Cluster:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o755)   # munged (as munge) must reach its socket directory
        ctld_port, *node_ports = _free_ports(1 + len(NODES))
        host = socket.gethostname().split(".")[0]
        (self.dir / "state").mkdir(exist_ok=True)
        (self.dir / "log").mkdir(exist_ok=True)
        for node in NODES:
            (self.dir / "spool" / node).mkdir(parents=True, exist_ok=True)
            devices = self.dir / "dev" / node
            devices.mkdir(parents=True, exist_ok=True)
            for i in range(GPUS_PER_NODE):
                path = devices / f"nvidia{i}"
                if not path.exists():
                    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        lines = [
            "ClusterName=pooltest",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.socket}",
            f"StateSaveLocation={self.dir / 'state'}",
            f"SlurmdSpoolDir={self.dir / 'spool' / '%n'}",
            f"SlurmctldPidFile={self.dir / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.dir / 'slurmd.%n.pid'}",
            f"SlurmctldLogFile={self.dir / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.dir / 'log' / 'slurmd.%n.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/pgid",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            # docs/SLURM.md, "slurm.conf": a job released by pool-slurm is scheduled at slurmctld's next
            # one-second pass, not up to 3 s after the pass its submission triggered (while it was held)
            "SchedulerParameters=batch_sched_delay=0",
            "GresTypes=gpu",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "JobRequeue=1",
            "KillWait=2",
            "MinJobAge=600",
            "InactiveLimit=0",
            "SlurmdTimeout=300",
            "MessageTimeout=10",
        ]
        if prolog:
            lines.append(f"PrologSlurmctld={prolog}")
        if epilog:
            lines.append(f"EpilogSlurmctld={epilog}")
        if task_epilog:   # run by slurmstepd as the job's user: it must be executable by every user
            lines.append(f"TaskEpilog={task_epilog}")
        if job_submit is not None:
            lines.append("JobSubmitPlugins=lua")
            (self.dir / "job_submit.lua").write_text(job_submit)
        for node, port in zip(NODES, node_ports):
            lines.append(f"NodeName={node} NodeAddr=127.0.0.1 NodeHostname={node} Port={port} "
                         f"CPUs={CPUS_PER_NODE} Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN")
        nodes = f"node[1-{len(NODES)}]"
        lines.append(f"PartitionName=gpu Nodes={nodes} Default=YES MaxTime=INFINITE State=UP")
        lines.append(f"PartitionName=open Nodes={nodes} MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        gres = [f"NodeName={node} Name=gpu File={self.dir / 'dev' / node}/nvidia[0-{GPUS_PER_NODE - 1}]"
                for node in NODES]
        (self.dir / "gres.conf").write_text("\n".join(gres) + "\n")
        return self

    # -- daemons ----------------------------------------------------------------

    def _run(self, *command: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(list(command), capture_output=True, text=True, timeout=timeout,
                              env=self.env(), stdin=subprocess.DEVNULL, cwd="/")

    def start_munge(self) -> None:
        user = pwd.getpwnam("munge")
        self.munge.mkdir(exist_ok=True)
        key = self.munge / "munge.key"
        if not key.exists():
            made = self._run(_tool("mungekey"), "--create", f"--keyfile={key}")
            if made.returncode != 0:
                raise RuntimeError(f"mungekey failed: {made.stderr}")
        for path in (self.munge, key):
            os.chown(path, user.pw_uid, user.pw_gid)
        self.munge.chmod(0o755)   # munged wants its socket's directory searchable by all
        key.chmod(0o400)
        started = self._run("runuser", "-u", "munge", "--", _tool("munged"),
                            f"--socket={self.socket}", f"--key-file={key}",
                            f"--pid-file={self.munge / 'munged.pid'}",
                            f"--log-file={self.munge / 'munged.log'}",
                            f"--seed-file={self.munge / 'munged.seed'}")
        if started.returncode != 0:
            raise RuntimeError(f"munged failed: {started.stderr}{self._tail(self.munge / 'munged.log')}")

    def start(self, timeout: float = 90) -> Cluster:
        problem = missing()
        if problem:
            raise RuntimeError(problem)
        if not self.conf.exists():
            self.write()
        self.start_munge()
        done = self._run(_tool("slurmctld"), "-c", "-f", str(self.conf))
        if done.returncode != 0:
            raise RuntimeError(f"slurmctld failed: {done.stderr}{self.log('slurmctld')}")
        for node in NODES:
            self.start_node(node)
        self.wait_idle(timeout)
        return self

    def start_node(self, node: str) -> None:
        done = self._run(_tool("slurmd"), "-N", node, "-f", str(self.conf))
        if done.returncode != 0:
            raise RuntimeError(f"slurmd {node} failed: {done.stderr}{self.log(f'slurmd.{node}')}")

    def states(self) -> dict[str, str]:
        done = self._run("sinfo", "-h", "-N", "-p", "gpu", "-o", "%N %t", timeout=20)
        if done.returncode != 0:
            return {}
        return dict(line.split() for line in done.stdout.splitlines() if line.strip())

    def wait_idle(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        seen: dict[str, str] = {}
        while time.monotonic() < deadline:
            seen = self.states()
            if all(seen.get(node) == "idle" for node in NODES):
                return
            time.sleep(0.2)
        raise RuntimeError(f"nodes not idle after {timeout}s: {seen}{self.log('slurmctld')}")

    def _pid(self, path: Path) -> int | None:
        try:
            return int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def pids(self) -> dict[str, int]:
        files = {"slurmctld": self.dir / "slurmctld.pid", "munged": self.munge / "munged.pid"}
        files.update({f"slurmd.{n}": self.dir / f"slurmd.{n}.pid" for n in NODES})
        return {name: pid for name, path in files.items() if (pid := self._pid(path)) is not None}

    def stop(self) -> None:
        """Stop every daemon this directory started (by the pids in its pid files)."""
        pids = self.pids()
        order = [name for name in pids if name != "munged"] + (["munged"] if "munged" in pids else [])
        for name in order:   # a test cluster's state is thrown away: 3 s for a clean stop, then SIGKILL
            _terminate(pids[name], grace=3)
        # A job step's slurmstepd outlives the slurmd that forked it (it is reparented to
        # init) and would run its batch script on after the cluster is gone; each one runs
        # in a directory of this cluster, which is how it is found.
        for pid in _running_in(self.dir):
            _terminate(pid, grace=2)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _tail(self, path: Path) -> str:
        return "\n" + path.read_text()[-3000:] if path.exists() else ""

    def log(self, name: str) -> str:
        return self._tail(self.dir / "log" / f"{name}.log")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:   # a zombie child of ours counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _running_in(root: Path) -> list[int]:
    """The processes whose working directory is inside `root` (Linux's /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cwd == str(root) or cwd.startswith(f"{root}/"):
            found.append(int(entry.name))
    return found


def _terminate(pid: int, grace: float = 10) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    if _alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def scratch() -> Path:
    """A short path munged can reach (its socket lives in it)."""
    return Path(tempfile.mkdtemp(prefix="pool-slurm-"))


if __name__ == "__main__":
    verb, where = sys.argv[1], Path(sys.argv[2])
    cluster = Cluster(where)
    if verb == "start":
        cluster.write().start()
        print(f"SLURM_CONF={cluster.conf}")
    elif verb == "stop":
        cluster.remove()
    else:
        sys.exit(f"usage: {sys.argv[0]} start|stop DIR")
