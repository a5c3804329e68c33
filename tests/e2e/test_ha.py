"""High availability over one PostgreSQL ledger (issue 15): a leader and
standbys, NOT_LEADER with the leader's address, failover under load with
nothing acknowledged lost, split brain, and PostgreSQL restarted underneath."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2

from protos.failover import LEADER_KEY
from protos.pool.v1 import claims_pb2

from .conftest import J, wait_for


@pytest.fixture
def pair(cluster, postgres_dsn):
    """A leader, then a standby, on one fresh ledger."""
    leader = cluster(dsn=postgres_dsn, name="a")
    standby = cluster(dsn=postgres_dsn, name="b", serving=False)
    return leader, standby


def test_a_standby_answers_not_leader_naming_the_leader_and_takes_over_when_it_dies(pair):
    leader, standby = pair
    leader.register()
    leader.poolctl("submit", "a1", "--tenant", "alpha", "--estimate-uj", str(5 * J))
    assert standby.health() == health_pb2.HealthCheckResponse.NOT_SERVING
    with pytest.raises(grpc.RpcError) as refused:
        standby.claims.Get(claims_pb2.GetClaimRequest(claim_id="a1"), timeout=5)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert refused.value.details() == f"NOT_LEADER: this scheduler is a standby; leader: {leader.address}"
    assert (LEADER_KEY, leader.address) in refused.value.trailing_metadata()
    both = f"{standby.address},{leader.address}"
    before = leader.json("claims")
    leader.kill()
    wait_for("the standby to take over", standby.serving, timeout_s=10)
    assert standby.json("claims") == before
    done = standby.poolctl("submit", "a2", "--tenant", "alpha", "--estimate-uj", str(J), "--scheduler", both)
    assert "ADMITTED" in done.stdout
