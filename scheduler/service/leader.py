"""Leadership over a shared ledger (`[ledger] store = "postgresql"`).

Any number of pool-schedulers may point at one PostgreSQL ledger. The leader
is the one whose write session holds the ledger's advisory lock: it alone
appends, and only while that session lasts (scheduler/ledger/postgres.py fences
every append on the lock). A standby

- follows: every `follow_ms` it reads the receipts appended since, verifies
  them (signatures and chain, from the head it has verified) and folds them
  through the same fold as replay, so its state is current when it takes over;
- answers every call but health with NOT_LEADER, naming the leader's
  advertised address (the application_name of the session holding the lock)
  as last read from PostgreSQL; while PostgreSQL does not answer, it names
  none (the lock may be anyone's by the time it is back);
- tries the lock on each turn; once it wins, it follows the tail it has not
  seen (nobody else can append now), and the scheduler starts serving.

The leader keeps its lease by a round trip every third of `lease_ms`; a leader
silent for `lease_ms` (stopped, partitioned) has its session ended by
PostgreSQL, and with it the lock. When the round trip or an append fails, the
leader has lost the ledger: it steps down without writing (the scheduler
exits 3 and, restarted, comes back as a standby).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from protos import daemon
from protos.failover import LEADER_KEY
from scheduler.ledger.postgres import PostgresStore
from scheduler.ledger.steward import Steward
from scheduler.ledger.store import StoreError
from scheduler.service.config import SchedulerConfig
from scheduler.service.errors import Refused
from scheduler.service.metrics import SchedulerMetrics

log = logging.getLogger("pool.scheduler")
APP_PREFIX = "pool:"    # the lock session's application_name is this and the advertised address


class Leadership:
    def __init__(self, config: SchedulerConfig, metrics: SchedulerMetrics) -> None:
        self.address = config.server.advertise or config.server.listen
        self._dsn, self._metrics = config.ledger.dsn, metrics
        self.lease_s, self.follow_s = config.ledger.lease_ms / 1000, config.ledger.follow_ms / 1000
        self.store: PostgresStore | None = None
        self.leader: str | None = None      # the leader's advertised address, as last seen
        self.lost: asyncio.Task | None = None   # once leading: ends, with the reason, when the lease is lost
        self.replayed_s = 0.0   # how long verifying and folding the ledger took (the first turn, and the tail)

    def refusal(self) -> Refused:
        """What a standby answers: NOT_LEADER, with the leader's address when
        known (not while PostgreSQL does not answer: it cannot be vouched for)."""
        if self.leader and not (self.store is not None and self.store.waiting):
            return Refused("NOT_LEADER", f"this scheduler is a standby; leader: {self.leader}",
                           ((LEADER_KEY, self.leader),))
        return Refused("NOT_LEADER", "this scheduler is a standby and no scheduler leads the ledger "
                                     "right now; retry shortly")

    async def acquire(self, open_steward: Callable[[PostgresStore], Steward]) -> Steward:
        """Follow the ledger until this scheduler holds its lock; the steward,
        verified and folded to the last receipt. The (long) first replay comes
        before the lock is tried, and the lease is kept from the moment it is
        won (`lost`). Standing by survives PostgreSQL going away: the standby
        reconnects and carries on. StoreError if the lock is lost while taking over."""
        steward: Steward | None = None
        since, said, failing = time.monotonic(), None, False
        while True:
            try:
                store = self.store or await _run(self._open)
                if steward is None and await _run(store.length):
                    replaying = time.monotonic()
                    steward = await _run(open_steward, store)
                    self.replayed_s = time.monotonic() - replaying
                if await _run(store.try_lead):
                    self.lost = asyncio.create_task(self._keep())
                    replaying = time.monotonic()
                    if steward is None:            # an empty ledger: this scheduler writes its genesis
                        steward = await _run(open_steward, store)
                    await _run(steward.follow)      # the tail nobody else can extend now
                    self.replayed_s += time.monotonic() - replaying
                    self._metrics.ledger_length.set(steward.length)
                    log.info("leader of the ledger at %d receipts (standing by took %.1f s)",
                             steward.length, time.monotonic() - since)
                    return steward
                if steward is not None:
                    await _run(steward.follow)
                    self._metrics.ledger_length.set(steward.length)
                holder = await _run(store.leader)
                self.leader = holder[len(APP_PREFIX):] if holder and holder.startswith(APP_PREFIX) else None
                if said != self.leader:
                    log.info("standby: following the ledger; leader: %s", self.leader or "none right now")
                    said = self.leader
            except StoreError as exc:
                if self.store is not None and self.store.leading:
                    raise
                self.leader = None   # not named while PostgreSQL cannot say who holds the lock
                if not failing:
                    log.warning("standby: %s; trying again every %g s", exc, self.follow_s)
                failing = True
                await _run(self._drop)
            else:
                if failing:
                    log.warning("standby: PostgreSQL answers again")
                failing = False
            daemon.watchdog()
            await asyncio.sleep(self.follow_s)

    def _open(self) -> PostgresStore:
        self.store = PostgresStore(self._dsn, create=True, application_name=APP_PREFIX + self.address,
                                   lease_s=self.lease_s, fenced=True, patient=True)
        return self.store

    def close(self) -> None:
        """Stopping while standing by: a read waiting for PostgreSQL (or a long
        replay) in a worker thread gives up, so the process can exit."""
        if self.store is not None:
            self.store.close()

    def _drop(self) -> None:
        """After a failure as a standby: reconnect the write session next turn."""
        if self.store is not None:
            try:
                self.store.reopen()
            except StoreError:
                pass

    async def _keep(self) -> StoreError:
        """As leader: keep the lease; returns why, once it is lost."""
        assert self.store is not None
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                await asyncio.wait_for(_run(self.store.heartbeat), self.lease_s)
            except StoreError as exc:
                return exc
            except asyncio.TimeoutError:
                return StoreError(f"PostgreSQL did not answer within the lease ({self.lease_s:g} s)")


async def _run(function, *args):
    return await asyncio.get_running_loop().run_in_executor(None, function, *args)
