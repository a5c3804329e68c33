"""High availability over one PostgreSQL ledger (issue 15): a leader and
standbys, NOT_LEADER with the leader's address, failover under load with
nothing acknowledged lost, split brain, and PostgreSQL restarted underneath."""

from __future__ import annotations

import itertools
import random
import signal
import statistics
import threading
import time
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2

from protos.failover import LEADER_KEY, Targets, addresses
from protos.pool.v1 import claims_pb2, claims_pb2_grpc, types_pb2
from pool_client.channel import FailoverChannel
from scheduler.ledger.stores import open_store
from scheduler.ledger.verify import verify
from scheduler.service.windows.batch import WINDOWS, windows_from_body

import pgcluster

from .conftest import J, free_port, wait_for
from .test_restart import reference_window_count, snapshot, spooled


@pytest.fixture
def pair(cluster, postgres_dsn):
    """A leader, then a standby (with /metrics), on one fresh ledger."""
    leader = cluster(dsn=postgres_dsn, name="a")
    standby = cluster(dsn=postgres_dsn, name="b", serving=False, metrics=f"127.0.0.1:{free_port()}")
    return leader, standby


def leader_gauge(scheduler) -> float:
    with urllib.request.urlopen(f"http://{scheduler.metrics_address}/metrics", timeout=5) as answer:
        return next(float(line.split()[1]) for line in answer.read().decode().splitlines()
                    if line.startswith("pool_leader "))


def test_a_standby_answers_not_leader_naming_the_leader_and_takes_over_when_it_dies(pair):
    leader, standby = pair
    leader.register()
    leader.poolctl("submit", "a1", "--tenant", "alpha", "--estimate-uj", str(5 * J))
    assert standby.health() == health_pb2.HealthCheckResponse.NOT_SERVING
    assert leader_gauge(standby) == 0
    with pytest.raises(grpc.RpcError) as refused:
        standby.claims.Get(claims_pb2.GetClaimRequest(claim_id="a1"), timeout=5)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert refused.value.details() == f"NOT_LEADER: this scheduler is a standby; leader: {leader.address}"
    assert (LEADER_KEY, leader.address) in refused.value.trailing_metadata()
    both = f"{standby.address},{leader.address}"
    before = leader.json("claims")
    leader.kill()
    wait_for("the standby to take over", standby.serving, timeout_s=10)
    assert leader_gauge(standby) == 1
    assert standby.json("claims") == before
    done = standby.poolctl("submit", "a2", "--tenant", "alpha", "--estimate-uj", str(J), "--scheduler", both)
    assert "ADMITTED" in done.stdout


def ledger_entries(dsn: str) -> list:
    found: list = []
    store = open_store(dsn)
    try:
        assert verify(store.read(), None, on_entry=found.append).valid
    finally:
        store.close()
    return found


def counted_window_seqs(dsn: str) -> list[int]:
    return [seq for e in ledger_entries(dsn) if e.kind == WINDOWS for seq in windows_from_body(e.body)[1].seq]


class Load:
    """Clients submitting and releasing through a FailoverChannel over every
    scheduler, recording only what was acknowledged."""

    def __init__(self, addresses: list[str], connect, clients: int = 3) -> None:
        self.submitted: set[str] = set()
        self.released: set[str] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._connect = connect   # one address's channel, as the harness's operator (mTLS)
        self._threads = [threading.Thread(target=self._run, args=(n, addresses), daemon=True)
                         for n in range(clients)]
        for thread in self._threads:
            thread.start()

    def _run(self, n: int, addresses: list[str]) -> None:
        claims = claims_pb2_grpc.ClaimsStub(FailoverChannel(addresses, self._connect))
        for i in itertools.count():
            if self._stop.is_set():
                return
            claim_id = f"c{n}-{i}"
            try:
                claims.Submit(claims_pb2.SubmitRequest(claim_id=claim_id, tenant=("alpha", "beta")[i % 2],
                                                       estimate_uj=1000), timeout=20)
                self.submitted.add(claim_id)
                if i % 2:   # sent again after a failover, it answers the released status
                    claims.Release(claims_pb2.ReleaseRequest(claim_id=claim_id), timeout=20)
                    self.released.add(claim_id)
            except grpc.RpcError as error:
                self.errors.append(f"{claim_id}: {error.code().name}: {error.details()}")
            time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)


def first_admission(scheduler, name: str, deadline_s: float = 20) -> float:
    """Submit to this scheduler until it admits; when that happened (monotonic)."""
    stop, last = time.monotonic() + deadline_s, None
    while time.monotonic() < stop:
        try:
            last = scheduler.claims.Submit(claims_pb2.SubmitRequest(claim_id=name, tenant="alpha",
                                                                    estimate_uj=1000), timeout=2)
            if last.state == types_pb2.ADMITTED:
                return time.monotonic()
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            last = error.details()
        time.sleep(0.02)
    explained = scheduler.poolctl("explain", name, check=False).stdout
    workers = scheduler.poolctl("workers", check=False).stdout
    raise AssertionError(f"{scheduler.name} admitted nothing within {deadline_s} s (last answer: {last}; "
                         f"{explained}; {workers}): {scheduler.log()[-3000:]}")


def names_leader(standby) -> bool:
    """Whether a standby has replayed the ledger: from then on its NOT_LEADER names the leader."""
    try:
        standby.claims.Get(claims_pb2.GetClaimRequest(claim_id="none"), timeout=5)
    except grpc.RpcError as error:
        return any(key == LEADER_KEY for key, _ in error.trailing_metadata() or ())
    return False


KILLS = 10


def test_failover_under_load_loses_nothing_acknowledged_and_counts_windows_once(cluster, postgres_dsn):
    """A leader and a standby on one PostgreSQL, clients submitting and releasing,
    an agent streaming the replayed trace; SIGKILL the leader at random moments,
    ten times (the killed one comes back as the standby each time)."""
    rng = random.Random(15)
    # checkpoints keep each restarted standby's replay short as the ledger grows
    a = cluster(dsn=postgres_dsn, name="a", lease_ms=3000, checkpoint_every=1000)
    b = cluster(dsn=postgres_dsn, name="b", lease_ms=3000, serving=False, checkpoint_every=1000)
    both = [a.address, b.address]
    # the trace (80 s) at 1.25x lasts past the ten kills: its host stays live for the claims
    agent = cluster.agent(a, speed=1.25, address=",".join(both))
    wait_for("the agent to register", lambda: a.json("workers")["workers"])
    load = Load(both, a.connect)
    leader, standby = a, b
    took: list[float] = []
    for kill in range(KILLS):
        time.sleep(rng.uniform(0.3, 1.5))
        killed_at = time.monotonic()
        leader.kill()
        took.append(first_admission(standby, f"probe-{kill}") - killed_at)
        leader.start(serving=False)          # restarted by its supervisor, it stands by
        # once replayed (a loaded machine takes seconds): a kill now measures takeover, not a replay
        wait_for("the restarted scheduler to follow", lambda: names_leader(leader), timeout_s=60)
        leader, standby = standby, leader
    load.stop()
    agent.process.terminate()                # as systemd stops it: it drains its spool and exits
    assert agent.process.wait(timeout=60) == 0, agent.log_path.read_text()
    print(f"failover (kill → first admission) over {KILLS} kills: "
          f"p50 {statistics.median(took):.2f} s, max {max(took):.2f} s")
    assert max(took) <= 5.0, took
    assert len(load.submitted) > 50 and not load.errors, load.errors[:5]

    claims = {c["claim_id"]: c["state"] for c in leader.json("claims")["claims"]}
    assert load.submitted <= set(claims), "an acknowledged submission was lost"
    assert all(claims[c] == "RELEASED" for c in load.released)
    seqs = counted_window_seqs(postgres_dsn)
    assert seqs == list(range(1, len(seqs) + 1)), "each window counted once, none lost"
    made, left = spooled(agent)   # a late wake merges boundaries (test_restart.py), so not the clock's count
    assert (len(seqs), left) == (made, 0), "every window the agent made is counted, none left behind"
    assert 0 < len(seqs) <= reference_window_count()

    live = snapshot(leader)
    standby.stop()
    leader.stop()
    fresh = cluster(dsn=postgres_dsn, name="fresh")   # from the last checkpoint any leader wrote, then the tail
    assert snapshot(fresh) == live


def test_split_brain_the_stopped_leader_wakes_up_and_steps_down_without_writing(cluster, postgres_dsn):
    """SIGSTOP the leader until the standby has taken over, then SIGCONT: the
    old leader's next append fails, it writes nothing, and says so in its log."""
    a = cluster(dsn=postgres_dsn, name="a", lease_ms=1000)
    b = cluster(dsn=postgres_dsn, name="b", lease_ms=1000, serving=False)
    a.poolctl("submit", "before", "--tenant", "alpha", "--estimate-uj", str(J))
    a.process.send_signal(signal.SIGSTOP)
    try:
        stopped_at = time.monotonic()
        wait_for("the standby to take over", b.serving, timeout_s=15)
        took = time.monotonic() - stopped_at
        b.poolctl("submit", "after", "--tenant", "alpha", "--estimate-uj", str(J))
        length = len(ledger_entries(postgres_dsn))
    finally:
        a.process.send_signal(signal.SIGCONT)
    with pytest.raises(grpc.RpcError) as refused:   # the old leader's next append
        a.claims.Submit(claims_pb2.SubmitRequest(claim_id="old", tenant="alpha", estimate_uj=J), timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert a.process.wait(timeout=15) == 3
    assert "no longer the leader of the ledger" in a.log() and "stepping down without writing" in a.log()
    kinds_after = [e for e in ledger_entries(postgres_dsn)][length:]
    assert all("old" not in repr(e.body) for e in kinds_after)
    claims = {c["claim_id"] for c in b.json("claims")["claims"]}
    assert claims == {"before", "after"}
    # the lease (counted from the last round trip, up to a third of it before the stop), then a turn
    assert 0.6 <= took <= 1.0 + 5.0, took


def test_postgresql_restarted_under_the_leader_loses_nothing_acknowledged(cluster, own_postgres):
    """The leader's session dies with the server: it steps down (exit 3) rather
    than reconnect, the standby reconnects and takes over once PostgreSQL is back,
    and every submission acknowledged before, during and after is there."""
    dsn = pgcluster.fresh_schema(own_postgres.dsn)
    a = cluster(dsn=dsn, name="a", lease_ms=2000)
    b = cluster(dsn=dsn, name="b", lease_ms=2000, serving=False)
    load = Load([a.address, b.address], a.connect, clients=2)
    wait_for("some acknowledged submissions", lambda: len(load.submitted) > 20)
    own_postgres.restart()
    assert a.process.wait(timeout=20) == 3
    assert "stepping down without writing" in a.log()
    wait_for("the standby to take over", b.serving, timeout_s=30)
    count = len(load.submitted)
    wait_for("submissions to the new leader", lambda: len(load.submitted) > count + 20, timeout_s=30)
    load.stop()
    # every failure was UNAVAILABLE and sent again: no call ended CANCELLED, none unresolved
    assert not load.errors, load.errors[:5]
    claims = {c["claim_id"]: c["state"] for c in b.json("claims")["claims"]}
    assert load.submitted <= set(claims), "an acknowledged submission was lost"
    unreleased = {c: claims[c] for c in load.released if claims[c] != "RELEASED"}
    assert not unreleased, f"acknowledged releases not RELEASED: {unreleased}; {b.log()[-2000:]}"
    a.start(serving=False)                    # restarted by systemd, it stands by
    assert a.health() == health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.mark.parametrize("ledger, message", [
    ('store = "postgresql"', 'ledger.dsn is required with store = "postgresql"'),
    ('store = "postgresql"\ndsn = "host=db password=hunter2"', "ledger.dsn must not hold a password: use a password file"),
    ('store = "postgresql"\ndsn = "postgresql://pool:hunter2@db/pool"', "ledger.dsn must not hold a password"),
    ('store = "mysql"', 'ledger.store must be "sqlite" or "postgresql"'),
])
def test_a_shared_ledger_configuration_is_checked_at_start(tmp_path, ledger, message):
    from protos.settings import ConfigError
    from scheduler.service import config as configuration
    path = tmp_path / "scheduler.toml"
    path.write_text(f'[server]\ninsecure = true\n[ledger]\n{ledger}\n[[tenants]]\nname = "root"\nguarantee_uj = 1\n')
    with pytest.raises(ConfigError, match=message) as refused:
        configuration.load(path)
    assert "hunter2" not in str(refused.value)


class Refusal(grpc.RpcError):
    def __init__(self, leader=None):
        self._metadata = ((LEADER_KEY, leader),) if leader else ()

    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def trailing_metadata(self):
        return self._metadata


def test_targets_follow_the_hint_then_go_round_with_backoff():
    targets = Targets(["a:1", "b:2", "c:3"], initial_s=0.1, cap_s=1.0)
    assert targets.failed(Refusal("c:3")) == 0.0 and targets.current == "c:3"   # the standby named the leader
    assert targets.failed(Refusal("d:4")) == 0.0 and targets.current == "d:4"   # one not listed is added
    assert targets.failed(Refusal()) == 0.0 and targets.current == "a:1"        # no hint: the next address
    assert 0.05 <= targets.failed(Refusal()) <= 1.0 and targets.current == "b:2"  # all four tried: back off
    targets.succeeded()
    assert targets.failed(Refusal()) == 0.0
    assert addresses(" a:1, b:2 ,") == ["a:1", "b:2"]
    with pytest.raises(ValueError):
        addresses(" , ")


def test_postgresql_going_away_while_a_standby_replays_or_stands_by_never_makes_it_exit(cluster, own_postgres):
    """A standby replaying the ledger when PostgreSQL restarts waits, NOT_SERVING,
    and resumes the replay where it was (issue 22: it exited 1 every time); one
    standing by while PostgreSQL is down names no leader, says so once, and
    stops at once when told."""
    dsn = pgcluster.fresh_schema(own_postgres.dsn)
    a = cluster(dsn=dsn, name="a", lease_ms=2000)
    claims = [f"r{i}" for i in range(8000)]   # pages of receipts: a replay of seconds, which the restart hits
    for at in range(0, len(claims), 1000):
        answer = a.claims.SubmitMany(claims_pb2.SubmitManyRequest(claims=[
            claims_pb2.SubmitRequest(claim_id=c, tenant="alpha", estimate_uj=1) for c in claims[at:at + 1000]]),
            timeout=60)
        assert not any(r.HasField("refused") for r in answer.results)
    b = cluster(dsn=dsn, name="b", lease_ms=2000, serving=False)   # replaying from here
    own_postgres.restart()
    assert a.process.wait(timeout=30) == 3
    wait_for("the standby to take over", b.serving, timeout_s=120)
    assert {c["claim_id"] for c in b.json("claims")["claims"]} >= set(claims)

    c = cluster(dsn=dsn, name="c", lease_ms=2000, serving=False)
    wait_for("the new standby to have replayed", lambda: names_leader(c), timeout_s=60)
    own_postgres.stop()
    assert b.process.wait(timeout=30) == 3          # the leader lost its lock: it steps down
    wait_for("the standby to stop naming a leader", lambda: not names_leader(c), timeout_s=30)
    assert c.process.poll() is None and c.health() == health_pb2.HealthCheckResponse.NOT_SERVING
    stopping = time.monotonic()
    assert c.stop() == 0 and time.monotonic() - stopping < 15
    assert sum("PostgreSQL" in line for line in c.log().splitlines()) == 1, c.log()   # said once
