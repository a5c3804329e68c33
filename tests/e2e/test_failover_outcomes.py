"""A client that sends every unknown outcome again ends with exactly the
ledger it meant, through any failover (issue 22, Must have 2).

Two real schedulers over one real PostgreSQL, over mTLS. A client (the
client library, pool_client) makes random calls — Submit, Progress,
Release, Cordon, RecordWitness — without pause, while the test fails the
leader over at random moments: SIGKILL, a PostgreSQL restart, a freeze
(SIGSTOP) past the lease. The client treats every failure that is not the
scheduler's answer (UNAVAILABLE, a deadline, the library's OutcomeUnknown)
as "unknown" and sends the same request again until it is answered. At the
end the ledger holds exactly one receipt per change the client meant:
one claim_submitted per claim, one released per released claim, one
progress per new count, one worker_cordoned per change of state, one
witness receipt per statement.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import grpc
import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

import pgcluster
from pool_client import Client
from pool_client.errors import OutcomeUnknown, PoolError
from protos.pool.v1 import claims_pb2, ops_pb2
from scheduler.kernel import event_from_body
from scheduler.ledger.witness import sign_statement

from .conftest import wait_for
from .test_ha import ledger_entries, names_leader

LEASE_MS = 1000
UNKNOWN_STATUS = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


@dataclass
class Intent:
    """What the client meant, and so what the ledger must hold."""
    submitted: list[str] = field(default_factory=list)
    released: set[str] = field(default_factory=set)
    progress: dict[str, list[int]] = field(default_factory=dict)   # claim -> each new count sent
    cordon_changes: int = 0
    cordoned: bool = False
    statements: set[bytes] = field(default_factory=set)   # one receipt per statement, however often sent
    calls: int = 0
    resent: int = 0     # unknown outcomes sent again


class Caller(threading.Thread):
    """The client: random calls, each sent until it is answered."""

    def __init__(self, client: Client, witness: Client, seed: int, witness_key, steward_key) -> None:
        super().__init__(daemon=True)
        self.client, self.witness, self.rng = client, witness, random.Random(seed)
        self.witness_key, self.steward_key = witness_key, steward_key
        self.intent, self.stop, self.failure = Intent(), threading.Event(), None

    def send(self, method, request):
        while True:
            try:
                return method(request, timeout=10)
            except PoolError as error:
                if not (isinstance(error, OutcomeUnknown) or error.status in UNKNOWN_STATUS):
                    raise   # the scheduler's own answer: none is expected here
                self.intent.resent += 1

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.step()
        except BaseException as error:   # the test reports it
            self.failure = error

    def step(self) -> None:
        intent, rng, client = self.intent, self.rng, self.client
        intent.calls += 1
        open_claims = [c for c in intent.submitted if c not in intent.released]
        roll = rng.random()
        if roll < 0.35 or not open_claims:
            claim = f"c{len(intent.submitted)}"
            self.send(client.submit, claims_pb2.SubmitRequest(claim_id=claim, tenant="alpha", estimate_uj=1000))
            intent.submitted.append(claim)
        elif roll < 0.6:
            claim = rng.choice(open_claims)
            counts = intent.progress.setdefault(claim, [])
            count = (counts[-1] if counts else 0) + rng.randint(1, 3)
            self.send(client.progress, claims_pb2.ProgressRequest(claim_id=claim, completed_units=count))
            counts.append(count)
        elif roll < 0.8:
            claim = rng.choice(open_claims)
            self.send(client.release, claims_pb2.ReleaseRequest(claim_id=claim))
            intent.released.add(claim)
        elif roll < 0.93:
            cordoned = rng.random() < 0.5
            self.send(client.cordon, ops_pb2.CordonRequest(worker="w1", cordoned=cordoned))
            intent.cordon_changes += cordoned != intent.cordoned
            intent.cordoned = cordoned
        else:
            head = self.send(client.ledger_head, ops_pb2.LedgerHeadRequest())
            statement = sign_statement(self.witness_key, self.steward_key, head.ledger_id, head.length, head.head)
            self.send(self.witness.record_witness, ops_pb2.RecordWitnessRequest(witness_receipt=statement))
            # a head read twice at one length (a standby's, behind the leader) signs the same statement
            intent.statements.add(statement)


class Pair:
    """A leader and a standby on one ledger; `fail(kind)` fails the leader
    over and brings the old one back as a standby (as systemd would)."""

    def __init__(self, harness, workdir, dsn: str, postgres) -> None:
        self.postgres = postgres
        self.leader = harness.Scheduler(workdir, dsn=dsn, name="a", lease_ms=LEASE_MS).start()
        self.leader.register("w1")
        standby = harness.Scheduler(workdir, dsn=dsn, name="b", lease_ms=LEASE_MS)
        # one witness key trusted by both, as an operator configures a pair
        standby.config.write_text(standby.config.read_text().replace(
            standby.witness_key.public.raw.hex(), self.leader.witness_key.public.raw.hex()))
        self.standby = standby.start(serving=False)
        wait_for("the standby to have replayed", lambda: names_leader(self.standby))

    def fail(self, kind: str) -> None:
        old, new = self.leader, self.standby
        if kind == "kill":
            old.kill()
        elif kind == "restart":
            self.postgres.restart()
            assert old.process.wait(timeout=30) == 3
        else:   # a freeze past the lease: the standby takes over, the old leader wakes and steps down
            old.process.send_signal(signal.SIGSTOP)
            try:
                wait_for("the standby to take over", new.serving, timeout_s=30)
            finally:
                old.process.send_signal(signal.SIGCONT)
            assert old.process.wait(timeout=30) == 3
        wait_for("the standby to take over", new.serving, timeout_s=60)
        old.start(serving=False)
        wait_for("the old leader to stand by, replayed", lambda: names_leader(old), timeout_s=60)
        self.leader, self.standby = new, old

    def stop(self) -> None:
        for s in (self.standby, self.leader):
            s.stop()


def own(key: str) -> str:
    """The id in a receipt's claim key, TENANT/ID (docs/LEDGER.md): the caller's claims are all alpha's."""
    tenant, _, claim_id = key.rpartition("/")
    assert tenant == "alpha", key
    return claim_id


def check(entries, intent: Intent) -> None:
    counts: Counter = Counter()
    progress: dict[str, list[int]] = {}
    statements = []
    for entry in entries:
        if entry.kind == "witness":
            statements.append(entry.body["statement"])
            continue
        if entry.kind not in ("claim_submitted", "released", "progress", "worker_cordoned"):
            continue
        event = event_from_body(entry.kind, entry.body)
        if entry.kind == "claim_submitted":
            counts["submitted", own(event.spec.claim_id)] += 1
        elif entry.kind == "released":
            counts["released", own(event.claim_id)] += 1
        elif entry.kind == "progress":
            progress.setdefault(own(event.claim_id), []).append(event.completed_units)
        else:
            counts["cordon", "w1"] += 1
    assert {c: n for (k, c), n in counts.items() if k == "submitted"} == dict.fromkeys(intent.submitted, 1)
    assert {c for k, c in counts if k == "released"} == intent.released
    assert all(n == 1 for (k, _), n in counts.items() if k == "released"), counts
    assert progress == {c: v for c, v in intent.progress.items() if v}
    assert counts["cordon", "w1"] == intent.cordon_changes
    assert len(statements) == len(set(statements)) and set(statements) == intent.statements


@settings(max_examples=2, deadline=None, phases=[Phase.generate],   # real processes: no shrinking, few examples
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), faults=st.permutations(["kill", "restart", "freeze"]),
       pauses=st.lists(st.floats(0.0, 0.8), min_size=3, max_size=3))
def test_a_client_resending_every_unknown_outcome_ends_with_the_ledger_it_meant(
        harness, tmp_path_factory, own_postgres, seed, faults, pauses):
    workdir = tmp_path_factory.mktemp("pair")
    dsn = pgcluster.fresh_schema(own_postgres.dsn)
    pair = Pair(harness, workdir, dsn, own_postgres)
    def client(principal: str) -> Client:
        cert, key = pair.leader.pki.files(principal)
        return Client([pair.leader.address, pair.standby.address], ca=str(pair.leader.pki.ca), cert=str(cert),
                      key=str(key), deadline=10)

    operator, witness = client("operator"), client("witness")
    caller = Caller(operator, witness, seed, pair.leader.witness_key, pair.leader.steward.public)
    try:
        caller.start()
        for kind, pause in zip(faults, pauses):
            wait_for("some calls", lambda: caller.intent.calls > 3 or caller.failure is not None)
            threading.Event().wait(pause)   # a random moment in a steady stream of calls
            pair.fail(kind)
        calls = caller.intent.calls
        wait_for("calls to the last leader", lambda: caller.intent.calls > calls + 5 or caller.failure is not None)
    finally:
        caller.stop.set()
        caller.join(timeout=60)
        operator.close()
        witness.close()
        pair.stop()
    assert caller.failure is None, repr(caller.failure)
    print(f"faults {faults}: {caller.intent.calls} calls, {caller.intent.resent} unknown outcomes sent again")
    check(ledger_entries(dsn), caller.intent)
