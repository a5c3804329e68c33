"""The bridge's side of Pool (pool_slurm/pool.py) over the client library, against a
real pool-scheduler over mutual TLS; no Slurm needed: a scheduler listed after a
dead address is reached (failover), refusals arrive typed, an answer that never
comes is "unreachable" (the bridge's fail-closed/fail-open case) within the
configured timeout, and a restarted scheduler is reached again by the same client."""

import time

import pytest

from pool_client import errors
from protos.pool.v1 import claims_pb2, types_pb2
from slurm_e2e import e2e

from pool_slurm.config import load
from pool_slurm.pool import Pool, unreachable


def bridge_pool(tmp_path, scheduler, addresses: str, timeout_s: float) -> Pool:
    cert, key = scheduler.pki.files("operator")
    path = tmp_path / "pool-slurm.toml"
    path.write_text(f'[pool]\nscheduler = "{addresses}"\nca = "{scheduler.pki.ca}"\ncert = "{cert}"\n'
                    f'key = "{key}"\ntimeout_s = {timeout_s}\n[slurm]\npartitions = ["gpu"]\n')
    return Pool(load(path))


def request(claim_id: str) -> claims_pb2.SubmitRequest:
    return claims_pb2.SubmitRequest(claim_id=claim_id, tenant="alpha", estimate_uj=10**9,
                                    resources=types_pb2.Resources(gpu_mdev=1000))


def test_the_bridge_reaches_pool_past_a_dead_address_gets_refusals_typed_and_survives_a_restart(cluster, tmp_path):
    s = cluster(hosts=("node1",))
    s.register("node1", gpus=2)
    pool = bridge_pool(tmp_path, s, f"127.0.0.1:{e2e.free_port()},{s.address}", timeout_s=2)
    try:
        [result] = pool.submit_many([request("slurm.t.1.0")])
        assert result.status.state == types_pb2.ADMITTED
        assert [c.claim_id for c in pool.open_claims("slurm.t.")] == ["slurm.t.1.0"]
        assert pool.get("slurm.t.404.0") is None   # UnknownClaim, as "no such claim"
        with pytest.raises(errors.BindConflict):   # an index the worker does not have
            pool.bind(pool.get("slurm.t.1.0"), [5])
        assert pool.release("slurm.t.1.0").state == types_pb2.RELEASED
        assert pool.release("slurm.t.1.0").state == types_pb2.RELEASED   # resent: answered as the first
        with pytest.raises(errors.PoolError) as refused:   # a settled claim cannot be bound
            pool.bind(pool.get("slurm.t.1.0"), [0])
        assert refused.value.code == "CLAIM_NOT_ADMITTED" and not unreachable(refused.value)

        s.kill()   # no answer at all: "unreachable" (the bridge's fail-closed/fail-open case), in time
        started = time.monotonic()
        with pytest.raises(errors.PoolError) as lost:
            pool.open_claims("slurm.")
        assert unreachable(lost.value) and time.monotonic() - started < 6
        s.start()
        [again] = pool.submit_many([request("slurm.t.2.0")])   # the same client, reconnected
        assert again.status.state == types_pb2.ADMITTED
    finally:
        pool.close()
