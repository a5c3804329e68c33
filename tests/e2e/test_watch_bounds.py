"""Bounded Watch buffers (issue 21 item 2), over mutual TLS against a real
scheduler: a watcher that does not read is cut off with WATCH_LAGGED and the
position to resume from, once limits.watch_events events wait for it; a Watch
from that position sends only the claims that changed since it (not the
subtree's whole history), then live events, and misses nothing."""

from __future__ import annotations

import time

import grpc

from protos.pool.v1 import claims_pb2

LIMITS = "\n[limits]\nwatch_events = 20\n"


def submit_many(s, prefix: str, n: int, tenant: str = "alpha") -> None:
    for at in range(0, n, 500):
        s.claims.SubmitMany(claims_pb2.SubmitManyRequest(claims=[
            claims_pb2.SubmitRequest(claim_id=f"{prefix}{i:05}", tenant=tenant, estimate_uj=1)
            for i in range(at, min(n, at + 500))]), timeout=60)


def test_a_watcher_that_does_not_read_lags_and_resumes_from_its_position(cluster, harness):
    s = cluster(harness.TREE + LIMITS)
    submit_many(s, "old", 1000)
    stalled = s.claims.Watch(claims_pb2.WatchRequest(tenant="alpha"), timeout=120)
    assert next(stalled).kind == claims_pb2.EVENT_CURRENT   # open; then it reads nothing more
    submit_many(s, "new", 600)        # events that watcher cannot take
    submit_many(s, "beta", 10, "beta")   # not watched: no event for it
    received = []
    try:
        for event in stalled:
            received.append(event)
        raise AssertionError("the watch ended without WATCH_LAGGED")
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
        assert error.details().startswith("WATCH_LAGGED: this watcher fell 20 events behind")
        position = int(dict(error.trailing_metadata())["pool-resume-from"])
    live = [e for e in received if e.kind != claims_pb2.EVENT_CURRENT]
    assert position == (live[-1].position if live else received[-1].position)
    assert len(received) < 1000 + 600   # it was cut off, not buffered without end

    # resume: only the claims changed since the position, then live events
    resumed = s.claims.Watch(claims_pb2.WatchRequest(tenant="alpha", resume_from=position), timeout=120)
    s.claims.Release(claims_pb2.ReleaseRequest(claim_id="old00000"), timeout=10)   # a live event to end on
    current = []
    for event in resumed:
        if event.kind != claims_pb2.EVENT_CURRENT:
            assert event.status.claim_id == "old00000" and event.kind == claims_pb2.EVENT_RELEASED
            break
        current.append(event.status.claim_id)
    resumed.cancel()
    changed = set()
    token = ""
    while True:
        page = s.claims.List(claims_pb2.ListClaimsRequest(tenant="alpha", page_token=token, page_size=1000),
                             timeout=30)
        changed |= {c.claim_id for c in page.claims if c.ledger_seq >= position and c.claim_id != "old00000"}
        token = page.next_page_token
        if not token:
            break
    seen = set(current) - {"old00000"}
    assert seen == changed, (len(seen), len(changed))   # nothing missed, nothing older
    assert 0 < len(current) < 1600       # not the subtree's whole history
    assert not any(c.startswith("old") for c in seen)


def test_resume_from_past_the_ledger_is_invalid(cluster):
    s = cluster()
    stream = s.claims.Watch(claims_pb2.WatchRequest(tenant="alpha", resume_from=(1 << 64) - 1), timeout=10)
    try:
        next(stream)
        raise AssertionError("a position past the ledger was accepted")
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details().startswith("INVALID_ARGUMENT: resume_from:")


def list_all(s, tenant: str) -> list[claims_pb2.ClaimStatus]:
    out, token = [], ""
    while True:
        page = s.claims.List(claims_pb2.ListClaimsRequest(tenant=tenant, page_token=token), timeout=30)
        out += page.claims
        token = page.next_page_token
        if not token:
            return out


def test_a_watch_pages_the_state_it_began_at_while_lists_move_on(cluster, harness):
    """A Watch's first statuses are those of the state it began at, page after
    page (200 a page), while claims change and List brings the shared listing
    to the latest state between its pages (3,000 statuses outrun the stream's
    flow-control window, so the watch is still paging when they do): queue
    positions and states as they were, then the changes as live events."""
    s = cluster(harness.TREE)
    submit_many(s, "c", 3000)
    began = list_all(s, "alpha")   # Get's statuses of the state the watch begins at
    watch = s.claims.Watch(claims_pb2.WatchRequest(tenant="alpha"), timeout=60)
    events = [next(watch)]
    for i in (1500, 2900):   # claims in later pages, and every position after them moves
        s.claims.Release(claims_pb2.ReleaseRequest(claim_id=f"c{i:05}"), timeout=10)
    assert len(list_all(s, "alpha")) == 3000   # the listing now shows the latest state
    for event in watch:
        events.append(event)
        if event.kind != claims_pb2.EVENT_CURRENT and event.status.claim_id == "c02900":
            break
    watch.cancel()
    current = [e.status for e in events if e.kind == claims_pb2.EVENT_CURRENT]
    assert current == began   # field for field, positions included
    assert [e.status.claim_id for e in events if e.kind == claims_pb2.EVENT_RELEASED] == ["c01500", "c02900"]


def test_a_principals_watches_send_their_first_statuses_at_its_pace_together(cluster, harness):
    # limits.watch_statuses_per_s: 100 a second with 100 at once, for all of alpha's Watches together;
    # 300 statuses in two Watches take at least 2 s whatever the machine (a floor, not a timing)
    s = cluster(harness.TREE + "\n[limits]\nwatch_statuses_per_s = 100\n")
    submit_many(s, "c", 150)
    alpha = s.as_principal("alpha")
    began = time.monotonic()
    watches = [alpha.claims.Watch(claims_pb2.WatchRequest(tenant="alpha"), timeout=60) for _ in range(2)]
    firsts = [[next(w).status.claim_id for _ in range(150)] for w in watches]
    took = time.monotonic() - began
    for w in watches:
        w.cancel()
    assert firsts == [[f"c{i:05}" for i in range(150)]] * 2   # every status, in order, in each
    assert took >= 1.9, f"300 first statuses at 100 a second came in {took:.2f} s"
