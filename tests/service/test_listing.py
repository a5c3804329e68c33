"""List's fast page (scheduler/service/listing.py) against its plain twin,
ClaimsServicer.status one claim at a time: field for field, for every claim
of states the engine reached through random submissions, releases, windows
and progress, with gangs, priorities, work classes, GPU types and actors,
whether the statuses were encoded ahead (warm, as after start-up) or not and
whatever the byte budget that ends a page; and its pages, joined, are every
matching claim in id order, once."""

from __future__ import annotations

import asyncio
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from protos.pool.v1 import claims_pb2
from scheduler import kernel
from scheduler.kernel import ClaimSpec, ClaimState, Placement, Reason, Resources
from scheduler.service import claims as claims_service
from scheduler.service import listing
from scheduler.service.claims import ClaimsServicer
from scheduler.service.config import Limits
from scheduler.service.principal import Principal, reset_caller, set_caller

from .test_engine import OPS, close, drive, opened, release, submit

SPECS = [ClaimSpec("g1", "a", Resources(gpu_mdev=1000), estimate_uj=10, gang_id="gang", gang_size=2),
         ClaimSpec("g2", "a", Resources(gpu_mdev=1000), estimate_uj=10, gang_id="gang", gang_size=2),
         ClaimSpec("wc", "b", Resources(cpu_millis=100, gpu_mdev=500, gpu_types=("H200",)), estimate_uj=20,
                   priority=3, placement=Placement.PLACEMENT_EXCLUSIVE),
         ClaimSpec("est", "b", Resources(memory_mb=10, disk_mb=5), estimate_uj=30),
         ClaimSpec("big", "a", Resources(cpu_millis=10), estimate_uj=8_000)]


async def _driven(path, ops, extra) -> tuple:
    """An engine on a new ledger at `path` driven through `ops` and the `extra` SPECS, a
    servicer on it, and the caller set (its token, for reset_caller)."""
    engine, steward = opened(path)
    token = set_caller(Principal("someone", "operator"))
    try:
        await drive(engine, ops)
        for n in extra:
            await submit(engine, SPECS[n])
    except BaseException:
        reset_caller(token)
        raise
    return engine, steward, ClaimsServicer(engine, Limits()), token


async def _moved_on(engine, released, later, progressed) -> None:
    """Claims released, submitted and progressed after a state a test keeps."""
    for claim_id in released:
        await release(engine, claim_id)
    for n in later:
        await submit(engine, SPECS[n])
    for claim_id, units in progressed:
        await engine.record(lambda latest: [e for e in [kernel.progress(latest.kernel, claim_id, units)]
                                           if e is not None and not isinstance(e, kernel.KernelError)],
                            time.time_ns())


def _plain(servicer: ClaimsServicer, committed, request: claims_pb2.ListClaimsRequest) -> list:
    tenants = None
    states = {ClaimState(s) for s in request.states}
    tree = committed.state.tree
    if request.tenant:
        tenants = {n for n in tree.nodes if request.tenant in tree.path(n)}
    return [servicer.status(c, committed) for c in sorted(committed.state.claims)
            if (tenants is None or committed.state.claims[c].tenant in tenants)
            and (not states or committed.state.claims[c].state in states)]


@settings(max_examples=30, deadline=None)
@given(ops=OPS, extra=st.lists(st.sampled_from(range(len(SPECS))), max_size=5),
       released=st.lists(st.sampled_from(["g1", "wc", "est", "big", "c1"]), max_size=3),
       page_size=st.integers(1, 7), tenant=st.sampled_from(["", "root", "a", "b"]),
       states=st.lists(st.sampled_from([s for s in ClaimState if s]), max_size=3),
       warm=st.lists(st.booleans(), min_size=2, max_size=2), budget=st.sampled_from([1 << 20, 1, 150, 400]),
       later=st.lists(st.sampled_from(range(len(SPECS))), max_size=3),
       progressed=st.lists(st.tuples(st.sampled_from(["c0", "c1", "c2", "g1"]), st.integers(1, 9)), max_size=2))
def test_pages_say_what_status_says_of_every_claim(tmp_path_factory, ops, extra, released, page_size, tenant, states,
                                                   warm, budget, later, progressed):
    path = tmp_path_factory.mktemp("ledger") / "ledger.sqlite"
    claims_service.LIST_PAGE_BYTES, before = budget, claims_service.LIST_PAGE_BYTES
    try:
        _pages_say_what_status_says(path, ops, extra, released, page_size, tenant, states, warm, budget, later,
                                    progressed)
    finally:
        claims_service.LIST_PAGE_BYTES = before


def _pages_say_what_status_says(path, ops, extra, released, page_size, tenant, states, warm, budget, later,
                                progressed) -> None:

    async def run() -> None:
        """Listed once, then again after releases (which admit and move the queue), new
        claims (new ids among the kept ones) and progress (a claim changed in place): one
        servicer, so the second listing follows the state by what changed and reuses what
        the first built where nothing it shows changed."""
        engine, steward, servicer, token = await _driven(path, ops, extra)
        try:
            await listing(servicer, engine, warm[0])
            await _moved_on(engine, released, later, progressed)
        finally:
            reset_caller(token)
        await listing(servicer, engine, warm[1])
        await close(engine, steward)

    async def listing(servicer: ClaimsServicer, engine, warm: bool) -> None:
        committed = engine.read()
        if warm:   # every claim encoded ahead, as start-up's warm_listing does for the open ones
            servicer._listing.warm(committed, committed.state.claims.values())
        request = claims_pb2.ListClaimsRequest(tenant=tenant, states=[int(s) for s in states], page_size=page_size)
        listed = []
        while True:
            answer = await ClaimsServicer.List.__wrapped__(servicer, request, None)
            # what the server sends (claims.add_to_server) is this answer, encoded
            sent = await ClaimsServicer.list_encoded.__wrapped__(servicer, request, None)
            assert claims_pb2.ListClaimsResponse.FromString(sent) == answer
            assert 1 <= len(answer.claims) <= page_size or not answer.claims and not answer.next_page_token
            sizes = [len(s.SerializeToString()) + 3 for s in answer.claims]   # (a record's tag and length: ≤ 3)
            assert sum(sizes[:-1]) < budget   # a page ends at the status that reaches the budget
            if answer.next_page_token and len(answer.claims) < page_size:
                assert sum(sizes) >= budget - 3 * len(sizes)
            listed += answer.claims
            if not answer.next_page_token:
                break
            request.page_token = answer.next_page_token
        assert listed == _plain(servicer, committed, request)
        if any(s.state == ClaimState.PENDING for s in listed):
            assert any(s.queue_position for s in listed)

    asyncio.run(run())


def test_every_field_a_status_can_fill_is_compared(tmp_path):
    """One fixed run that sets every field the comparison above could miss
    (else both paths could leave a field empty and agree)."""
    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite")
        token = set_caller(Principal("someone", "operator"))
        try:
            await drive(engine, [("submit", "a", 10, 1000, 0), ("window", "w1", 500), ("progress", 0, 3)])
            for at, spec in enumerate(SPECS, 1):   # with submission times, as Submit records them
                await engine.decide(lambda latest: [kernel.submit(latest.kernel, spec, at)], at)
            await release(engine, "wc")
        finally:
            reset_caller(token)
        servicer = ClaimsServicer(engine, Limits())
        request = claims_pb2.ListClaimsRequest()
        listed = (await ClaimsServicer.List.__wrapped__(servicer, request, None)).claims
        assert list(listed) == _plain(servicer, engine.read(), request)
        filled = {field.name for status in listed for field, _ in status.ListFields()}
        # all but a borrowed admission's two fields (a claim with the user's own estimate may not borrow) and
        # `bound`, which only Bind sets (RULES §10)
        assert filled == {f.name for f in claims_pb2.ClaimStatus.DESCRIPTOR.fields} - {"borrowed", "borrowed_uj", "bound"}
        await close(engine, steward)

    asyncio.run(run())


def test_a_status_is_reused_only_while_nothing_it_shows_changed(tmp_path):
    """A second listing reuses the statuses of claims that did not change and
    builds those that did (a release, a queue that moved) again: both
    listings say what status says."""
    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite")
        await drive(engine, [("submit", "a", 10, 1000, 0), ("submit", "b", 10, 1000, 0), ("submit", "a", 10, 1000, 0),
                             ("submit", "b", 10, 1000, 0), ("submit", "a", 10, 1000, 0),
                             ("submit", "b", 10, 1000, 0)])
        servicer = ClaimsServicer(engine, Limits())
        request = claims_pb2.ListClaimsRequest()
        first = list((await ClaimsServicer.List.__wrapped__(servicer, request, None)).claims)
        assert first == _plain(servicer, engine.read(), request)
        again = list((await ClaimsServicer.List.__wrapped__(servicer, request, None)).claims)
        assert again == first
        admitted = next(s.claim_id for s in first if s.state == ClaimState.ADMITTED)
        assert any(s.state == ClaimState.PENDING for s in first), "a queue that moves on the release"
        await release(engine, admitted)
        after = list((await ClaimsServicer.List.__wrapped__(servicer, request, None)).claims)
        assert after == _plain(servicer, engine.read(), request) != first
        await close(engine, steward)

    asyncio.run(run())


def test_a_kept_status_follows_a_new_verdict_on_a_claim_that_did_not_change(tmp_path):
    """A decision can change why a claim waits without changing the claim: the
    kept status says the new reason (here the same state, judged anew)."""
    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite")
        await drive(engine, [("submit", "a", 10, 1000, 0)] * 3 + [("submit", "b", 10, 1000, 0)] * 3)
        servicer = ClaimsServicer(engine, Limits())
        committed = engine.read()
        waiting = [c for c, claim in committed.state.claims.items() if claim.state is ClaimState.PENDING]
        assert waiting
        first = servicer._listing.statuses(committed, [committed.state.claims[c] for c in waiting])
        assert [s.reason for s in first] == [committed.pending_reason[c] for c in waiting]
        judged = committed._replace(pending_reason={c: Reason.NO_ELIGIBLE_WORKER for c in waiting})
        again = servicer._listing.statuses(judged, [judged.state.claims[c] for c in waiting])
        assert [s.reason for s in again] == [Reason.NO_ELIGIBLE_WORKER] * len(waiting)
        assert list(again) == [servicer.status(c, judged) for c in waiting]
        await close(engine, steward)

    asyncio.run(run())


def test_a_list_that_asks_no_page_size_gets_list_page_size_claims(tmp_path):
    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite")
        await drive(engine, [("submit", "a", 10, 1000, 0)] * 7)
        servicer = ClaimsServicer(engine, Limits(page_size=2, max_page_size=4, list_page_size=3))
        request = claims_pb2.ListClaimsRequest()
        first = await ClaimsServicer.List.__wrapped__(servicer, request, None)
        assert len(first.claims) == 3 and first.next_page_token == first.claims[-1].claim_id
        request.page_token, request.page_size = first.next_page_token, 4
        second = await ClaimsServicer.List.__wrapped__(servicer, request, None)
        assert len(second.claims) == 4 and not second.next_page_token   # the last four: no more
        warmed = await servicer.warm_listing(chunk=2)
        assert warmed == 0   # every claim was encoded by the listings, and none changed since
        await close(engine, steward)

    asyncio.run(run())


def test_warming_encodes_the_open_claims_once_between_calls(tmp_path):
    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite")
        await drive(engine, [("submit", "a", 10, 1000, 0), ("submit", "b", 10, 1000, 0)] * 3)
        servicer = ClaimsServicer(engine, Limits())
        state = engine.read().state
        open_ = [c for c, claim in state.claims.items() if claim.state in (ClaimState.PENDING, ClaimState.ADMITTED)]
        assert await servicer.warm_listing(chunk=2) == len(open_) > 0
        assert set(servicer._listing._made) == set(open_)
        request = claims_pb2.ListClaimsRequest()
        listed = (await ClaimsServicer.List.__wrapped__(servicer, request, None)).claims
        assert list(listed) == _plain(servicer, engine.read(), request)
        await close(engine, steward)

    asyncio.run(run())


# -- Watch's first statuses: listing.events against ClaimEvent(status=ClaimsServicer.status(...)) --------------

def _event_twin(servicer: ClaimsServicer, committed, claim_id: str, time_ns: int, position: int,
                kind: int) -> claims_pb2.ClaimEvent:
    return claims_pb2.ClaimEvent(status=servicer.status(claim_id, committed), time_ns=time_ns, position=position,
                                 kind=kind)


def _events_say_what_status_says(servicer: ClaimsServicer, committed, time_ns: int, position: int, kind: int) -> None:
    claims = [committed.state.claims[c] for c in sorted(committed.state.claims)]
    sent = servicer._listing.events(committed, claims, time_ns, position, kind)
    # compared as messages: a waiting claim's reason and position come after its other fields
    assert [claims_pb2.ClaimEvent.FromString(e) for e in sent] == \
        [_event_twin(servicer, committed, c.claim_id, time_ns, position, kind) for c in claims]


@settings(max_examples=30, deadline=None)
@given(ops=OPS, extra=st.lists(st.sampled_from(range(len(SPECS))), max_size=5),
       released=st.lists(st.sampled_from(["g1", "wc", "est", "big", "c0", "c1", "c2"]), max_size=3),
       later=st.lists(st.sampled_from(range(len(SPECS))), max_size=3),
       progressed=st.lists(st.tuples(st.sampled_from(["c0", "c1", "c2", "g1"]), st.integers(1, 9)), max_size=2),
       seen=st.sampled_from(["none", "began", "later", "both"]),
       time_ns=st.sampled_from([0, 1, 1 << 62]), position=st.sampled_from([0, 1, 300, (1 << 64) - 1]),
       kind=st.sampled_from([0, claims_pb2.EVENT_CURRENT, claims_pb2.EVENT_RECLAIMED]))
def test_a_watch_s_events_say_what_status_says_of_the_state_it_began_at(
        tmp_path_factory, ops, extra, released, later, progressed, seen, time_ns, position, kind):
    """A Watch's first events, encoded from the listing's kept records, are the
    ClaimEvents of ClaimsServicer.status of the state the watch began at, for
    every claim, whether the listing shows that state, has moved on to a later
    one (releases that admit and move the queue, new claims, progress: claims
    changed and claims not), or never encoded them; and paging the old state
    leaves the listing where it was."""
    path = tmp_path_factory.mktemp("ledger") / "ledger.sqlite"

    async def run() -> None:
        engine, steward, servicer, token = await _driven(path, ops, extra)
        try:
            began = engine.read()
            if seen in ("began", "both"):   # the listing showed the watch's state (and kept its records)
                servicer._listing.warm(began, began.state.claims.values())
                _events_say_what_status_says(servicer, began, time_ns, position, kind)
            await _moved_on(engine, released, later, progressed)
            now = engine.read()
            if seen in ("later", "both"):   # a List (or warming) moved the listing on
                servicer._listing.warm(now, now.state.claims.values())
            _events_say_what_status_says(servicer, began, time_ns, position, kind)
            if seen in ("later", "both"):
                assert servicer._listing.shows(now)
            _events_say_what_status_says(servicer, now, time_ns, position, kind)
        finally:
            reset_caller(token)
        await close(engine, steward)

    asyncio.run(run())


def test_a_watch_of_an_older_state_reuses_the_records_of_claims_that_did_not_change(tmp_path, monkeypatch):
    """The listing moved past the watch's state by a release that admitted a
    waiting claim and moved the queue: only the released and the admitted
    claims' statuses are built again, the others' records are reused (the
    waiting ones with the old state's reason and position), and every event
    says what status says of the old state."""
    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite")
        await drive(engine, [("submit", "a", 10, 1000, 0), ("submit", "b", 10, 1000, 0)] * 4)
        servicer = ClaimsServicer(engine, Limits())
        began = engine.read()
        servicer._listing.warm(began, began.state.claims.values())
        admitted = [c for c, claim in began.state.claims.items() if claim.state is ClaimState.ADMITTED]
        waiting = [c for c, claim in began.state.claims.items() if claim.state is ClaimState.PENDING]
        assert admitted and len(waiting) >= 2
        await release(engine, admitted[0])
        now = engine.read()
        changed = {c for c in began.state.claims if now.state.claims.get(c) is not began.state.claims[c]}
        assert admitted[0] in changed and any(c in changed for c in waiting), "the release admitted a waiting claim"
        moved = [c for c in waiting if c not in changed and
                 kernel.queue_position(now.state, now.state.claims[c]) !=
                 kernel.queue_position(began.state, began.state.claims[c])]
        assert moved, "a waiting claim that did not change but moved up the queue"
        servicer._listing.warm(now, now.state.claims.values())
        built = []
        monkeypatch.setattr(listing, "_made", lambda *args: built.append(args[0].claim_id) or made(*args))
        _events_say_what_status_says(servicer, began, 5, 7, claims_pb2.EVENT_CURRENT)
        assert sorted(built) == sorted(changed)
        await close(engine, steward)

    made = listing._made
    asyncio.run(run())


def test_a_claim_event_s_status_is_a_page_s_record():
    """What listing.events rests on: ClaimEvent.status and ListClaimsResponse.claims
    are both field 1, length-delimited, so one tag."""
    status = claims_pb2.ClaimStatus(claim_id="x", queue_position=3)
    assert claims_pb2.ClaimEvent(status=status).SerializeToString() == \
        claims_pb2.ListClaimsResponse(claims=[status]).SerializeToString()


def test_a_kept_record_of_the_same_claim_is_not_reused_for_another_seq_or_principal(tmp_path):
    """The same claim object with another receipt seq, submitter or releaser in
    the watch's state than the listing keeps its record with: built again, as
    status says it of that state (each a state no receipt leads to, made by hand)."""
    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite")
        await drive(engine, [("submit", "a", 10, 1000, 0), ("submit", "b", 10, 1000, 0)] * 3)
        servicer = ClaimsServicer(engine, Limits())
        now = engine.read()
        assert {c.state for c in now.state.claims.values()} == {ClaimState.ADMITTED, ClaimState.PENDING}
        servicer._listing.warm(now, now.state.claims.values())
        service = now.service
        for changed in ({"claim_seq": service.claim_seq.set("c0", 99_999)},
                        {"submitted_by": service.submitted_by.set("c1", "someone-else")},
                        {"released_by": service.released_by.set("c2", "a-releaser")},
                        {"claim_seq": service.claim_seq.set("c4", 77_777)},   # a waiting one
                        {"submitted_by": service.submitted_by.set("c5", "someone-else")}):
            began = now._replace(service=service._replace(**changed))
            _events_say_what_status_says(servicer, began, 5, 7, claims_pb2.EVENT_CURRENT)
        await close(engine, steward)

    asyncio.run(run())


def test_a_watcher_that_lagged_costs_no_more_statuses(tmp_path, monkeypatch):
    """Once every watcher lagged (a Watch whose client does not read), a change
    builds no event: its status would go nowhere."""
    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite")
        await drive(engine, [("submit", "a", 10, 1000, 0)])
        servicer = ClaimsServicer(engine, Limits())
        watcher = claims_service.Watcher(lambda claim: True, 1, 1 << 20)   # one event waits at most
        servicer._watchers.add(watcher)
        built = []
        status = servicer.status
        monkeypatch.setattr(servicer, "status", lambda *args: built.append(args[0]) or status(*args))
        await submit(engine, SPECS[3])   # an event, waiting
        assert built and not watcher.behind
        await submit(engine, SPECS[4])   # one more: past watch_events
        assert watcher.behind
        built.clear()
        await submit(engine, SPECS[0])
        assert built == []
        await close(engine, steward)

    asyncio.run(run())
