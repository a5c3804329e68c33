"""The test cluster itself: two idle nodes with 8 GPUs each, a GPU job runs on
the GPUs it asked for, and stop leaves no daemon behind."""

import subprocess

from slurm_e2e import e2e, slurm_cluster


def test_a_gpu_job_runs_on_the_test_cluster_and_stop_ends_every_daemon(slurm, tmp_path):
    c = slurm()
    nodes = subprocess.run(["sinfo", "-h", "-N", "-p", "gpu", "-o", "%N %G"], capture_output=True, text=True,
                           env=c.env(), check=True).stdout.split("\n")
    assert sorted(line.split()[0] for line in nodes if line) == ["node1", "node2"]
    assert all("gpu:8" in line for line in nodes if line)
    out = tmp_path / "out"
    done = subprocess.run(["sbatch", "--parsable", "-N2", "--gres=gpu:3", f"--output={out}",
                           "--wrap", "srun -l sh -c 'echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES'"],
                          capture_output=True, text=True, env=c.env(), check=True)
    job = done.stdout.strip()

    def state() -> str:
        shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, env=c.env())
        return shown.stdout.split("JobState=")[1].split()[0] if "JobState=" in shown.stdout else ""
    e2e.wait_for("the two-node job to complete", lambda: state() == "COMPLETED", 60)
    lines = sorted(line.split(": ", 1)[1] for line in out.read_text().splitlines())
    assert [line.split()[0] for line in lines] == ["node1", "node2"]
    assert all(len(line.split()[1].split(",")) == 3 for line in lines)
    pids = c.pids()
    assert set(pids) == {"slurmctld", "munged", "slurmd.node1", "slurmd.node2"}
    c.stop()
    assert not [name for name, pid in pids.items() if slurm_cluster._alive(pid)]
