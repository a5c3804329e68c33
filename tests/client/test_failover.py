"""The library across a real failover: a leader and a standby over one
PostgreSQL ledger, mutual TLS. A call sent to the standby follows its
NOT_LEADER hint; a Watch resumes on the new leader after the old one dies,
delivering what changed and nothing twice; a call held by a frozen leader
is given up by keepalive and answered by the standby that took over."""

from __future__ import annotations

import signal
import threading
import time

import pool_client
from protos.pool.v1 import claims_pb2, types_pb2

J = 1_000_000
RELEASED = types_pb2.ClaimState.Value("RELEASED")


def library(s, addresses: list[str], **kwargs) -> pool_client.Client:
    return s.as_principal("operator").library(*addresses, **kwargs)


def test_the_hint_the_watch_and_a_kill(cluster, postgres_dsn, harness):
    leader = cluster(dsn=postgres_dsn, name="a")
    standby = cluster(dsn=postgres_dsn, name="b", serving=False)
    with library(leader, [standby.address, leader.address]) as pool:
        harness.wait_for("the standby to name the leader", lambda: _names_leader(standby))
        pool.submit(claim_id="f1", tenant="alpha", estimate_uj=J)
        assert pool.targets.current == leader.address   # sent to the standby first, then where it pointed
        pool.submit(claim_id="f2", tenant="alpha", estimate_uj=J)

        events: list[claims_pb2.ClaimEvent] = []
        watch = pool.watch(tenant="alpha")
        events += [next(watch), next(watch)]
        assert sorted(e.status.claim_id for e in events) == ["f1", "f2"]
        pool.progress(claim_id="f1", completed_units=3)
        events.append(next(watch))           # a live event: the watch now has a position
        assert events[-1].kind == claims_pb2.EVENT_PROGRESS

        leader.kill()
        released = pool.release(claim_id="f1")   # sent to the dead leader, then to the new one
        assert released.state == RELEASED and pool.targets.current == standby.address
        resumed = next(watch)                    # the same iterator, now on the new leader
        assert resumed.status.claim_id == "f1" and resumed.status.state == RELEASED
        pool.release(claim_id="f2")
        following = next(watch)
        assert following.status.claim_id == "f2" and following.status.state == RELEASED
        watch.close()
        seqs = [(e.status.claim_id, e.status.ledger_seq) for e in events + [resumed, following]]
        assert len(seqs) == len(set(seqs))       # nothing delivered twice


def test_a_call_held_by_a_frozen_leader_moves_to_the_standby(cluster, postgres_dsn, harness):
    leader = cluster(dsn=postgres_dsn, name="a", lease_ms=1500)
    standby = cluster(dsn=postgres_dsn, name="b", lease_ms=1500, serving=False)
    harness.wait_for("the standby to name the leader", lambda: _names_leader(standby))
    with library(leader, [leader.address, standby.address], deadline=25) as pool:
        pool.submit(claim_id="z1", tenant="alpha", estimate_uj=J)
        leader.process.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            status = pool.get(claim_id="z1")     # held by the frozen leader until keepalive gives it up
            took = time.monotonic() - started
        finally:
            leader.process.send_signal(signal.SIGCONT)
        assert status.claim_id == "z1" and pool.targets.current == standby.address
        # keepalive (1 s + 2 s) and the lease (1.5 s) overlap: well inside the 25 s deadline that
        # a client without keepalive would have spent waiting on the frozen leader
        print(f"frozen leader: the call moved to the standby in {took:.2f} s")
        assert took < 12, took


def _names_leader(standby) -> bool:
    import grpc
    try:
        standby.claims.Get(claims_pb2.GetClaimRequest(claim_id="none"), timeout=5)
    except grpc.RpcError as error:
        return "leader:" in (error.details() or "")
    return False


def test_the_asyncio_client_follows_the_hint_and_resumes_its_watch(cluster, postgres_dsn, harness):
    import asyncio

    from pool_client import aio
    leader = cluster(dsn=postgres_dsn, name="a")
    standby = cluster(dsn=postgres_dsn, name="b", serving=False)
    harness.wait_for("the standby to name the leader", lambda: _names_leader(standby))
    cert, key = leader.pki.files("operator")

    async def run() -> None:
        async with aio.Client([standby.address, leader.address], ca=str(leader.pki.ca), cert=str(cert),
                              key=str(key)) as pool:
            await pool.submit(claim_id="q1", tenant="alpha", estimate_uj=J)
            assert pool.targets.current == leader.address
            watch = pool.watch(claim_id="q1")
            first = await watch.__anext__()
            await pool.progress(claim_id="q1", completed_units=1)
            live = await watch.__anext__()
            assert first.kind == claims_pb2.EVENT_CURRENT and live.kind == claims_pb2.EVENT_PROGRESS
            leader.kill()
            released = await pool.release(claim_id="q1")
            assert released.state == RELEASED and pool.targets.current == standby.address
            resumed = await watch.__anext__()
            assert resumed.status.state == RELEASED and resumed.status.ledger_seq > live.status.ledger_seq
            await watch.aclose()
    asyncio.run(run())
