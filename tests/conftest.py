"""Suite-wide settings. Hypothesis runs a fixed, CI-sized budget with no
per-example deadline (a loaded 2-core CI machine must not turn slowness into
failures); POOL_HYPOTHESIS_PROFILE=thorough runs ten times more examples."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=150, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=1500, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("POOL_HYPOTHESIS_PROFILE", "ci"))


# -- PostgreSQL (the HA store) ------------------------------------------------
# Tests that need it take `postgres_dsn` (a fresh schema each) or `own_postgres`
# (a cluster of their own, which they may restart). POOL_TEST_POSTGRES_DSN names
# a server to use (.ci/run starts one); without it a throwaway cluster is started
# from the local binaries; without those the tests are skipped, saying how to run them.

import sys as _sys                      # noqa: E402
from pathlib import Path as _Path       # noqa: E402

import pytest                           # noqa: E402

_sys.path.insert(0, str(_Path(__file__).parent))
import pgcluster                        # noqa: E402


@pytest.fixture(scope="session")
def postgres_server():
    dsn = os.environ.get("POOL_TEST_POSTGRES_DSN")
    if dsn:
        yield dsn
        return
    if pgcluster.binaries() is None:
        pytest.skip(f"PostgreSQL tests skipped: {pgcluster.HOW}")
    cluster = pgcluster.Cluster(pgcluster.scratch()).init().start()
    try:
        yield cluster.dsn
    finally:
        cluster.remove()


@pytest.fixture
def postgres_dsn(postgres_server) -> str:
    """A DSN whose connections land in a new, empty schema."""
    return pgcluster.fresh_schema(postgres_server)


@pytest.fixture
def own_postgres():
    """A cluster for this test alone (it may stop and restart it)."""
    if pgcluster.binaries() is None:
        pytest.skip(f"PostgreSQL tests skipped: {pgcluster.HOW}")
    cluster = pgcluster.Cluster(pgcluster.scratch()).init().start()
    try:
        yield cluster
    finally:
        cluster.remove()
