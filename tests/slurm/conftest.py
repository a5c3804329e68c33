"""A real Slurm cluster (tests/slurm/cluster.py) for the bridge's tests, and the
e2e harness (a pool-scheduler, agents replaying the bundled trace) beside it.

Without Slurm, munge or root the tests here are skipped, saying how to run them
(.ci/run installs Slurm)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import cluster as slurm_cluster   # noqa: E402

# The e2e fixtures (cluster, harness) and helpers, loaded by path: importlib mode cannot import a conftest.
_spec = importlib.util.spec_from_file_location("pool_e2e_conftest", HERE.parent / "e2e" / "conftest.py")
e2e = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(e2e)
cluster = e2e.cluster
harness = e2e.harness


def _skip_without_slurm() -> None:
    problem = slurm_cluster.missing()
    if problem:
        pytest.skip(f"Slurm tests skipped: {problem}")


@pytest.fixture
def slurm():
    """slurm(prolog=, epilog=, job_submit=) starts a cluster of its own for this test."""
    _skip_without_slurm()
    started: list[slurm_cluster.Cluster] = []

    def start(**hooks) -> slurm_cluster.Cluster:
        c = slurm_cluster.Cluster(slurm_cluster.scratch()).write(**hooks).start()
        started.append(c)
        return c

    yield start
    for c in started:
        c.remove()
