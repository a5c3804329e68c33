"""Reads serve durable state only (issue 12): a scheduler killed with SIGKILL
again and again, while clients submit and release and a reader reads, comes
back with everything any read returned."""

from __future__ import annotations

import random
import threading
import time

import grpc

from protos.pool.v1 import claims_pb2, types_pb2

from .conftest import wait_for

WRITERS = 3
KILLS = 5


def every_claim(s) -> dict[str, claims_pb2.ClaimStatus]:
    """Every claim the scheduler has, page by page (a page is 500 by default)."""
    claims, token = {}, ""
    while True:
        page = s.claims.List(claims_pb2.ListClaimsRequest(page_token=token), timeout=10)
        claims.update((c.claim_id, c) for c in page.claims)
        if not (token := page.next_page_token):
            return claims


def test_nothing_a_read_returned_is_missing_after_a_sigkill(cluster):
    s = cluster()
    s.register()
    rng = random.Random(13)
    seen: dict[str, tuple[int, int]] = {}   # claim -> (ledger_seq, state) of the latest read of it
    in_flight = [""] * WRITERS
    lock = threading.Lock()

    def note(status: claims_pb2.ClaimStatus) -> None:
        with lock:
            if status.ledger_seq >= seen.get(status.claim_id, (-1, 0))[0]:
                seen[status.claim_id] = (status.ledger_seq, status.state)

    def write(k: int, stop: threading.Event, start: int) -> None:
        for i in range(start, start + 100_000):
            if stop.is_set():
                return
            claim_id = in_flight[k] = f"w{k}-{i}"
            try:
                s.claims.Submit(claims_pb2.SubmitRequest(claim_id=claim_id, tenant=("alpha", "beta")[i % 2],
                                                         estimate_uj=1000, resources=types_pb2.Resources()),
                                timeout=5)
                if i % 2:
                    s.claims.Release(claims_pb2.ReleaseRequest(claim_id=claim_id), timeout=5)
            except grpc.RpcError:
                return

    def read(stop: threading.Event) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                for claim_id in list(in_flight):   # the claims being decided right now
                    if claim_id:
                        try:
                            note(s.claims.Get(claims_pb2.GetClaimRequest(claim_id=claim_id), timeout=5))
                        except grpc.RpcError as error:
                            if error.code() != grpc.StatusCode.NOT_FOUND:
                                raise
                if n % 8 == 0:
                    for status in s.claims.List(claims_pb2.ListClaimsRequest(), timeout=5).claims:
                        note(status)
            except grpc.RpcError:
                return

    for round_ in range(KILLS):
        stop = threading.Event()
        threads = [threading.Thread(target=write, args=(k, stop, round_ * 100_000)) for k in range(WRITERS)]
        threads.append(threading.Thread(target=read, args=(stop,)))
        for thread in threads:
            thread.start()
        wait_for("claims to be written", lambda: len(seen) > 20 * (round_ + 1))
        time.sleep(rng.uniform(0.05, 0.5))
        s.kill()
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        s.start()
        after = every_claim(s)
        with lock:
            missing = sorted(c for c in seen if c not in after)
            assert not missing, f"round {round_}: read, then gone after the kill: {missing[:5]}"
            for claim_id, (seq, state) in seen.items():
                now = after[claim_id]
                assert now.ledger_seq > seq or (now.ledger_seq == seq and now.state == state), (
                    f"round {round_}: {claim_id} was read as {types_pb2.ClaimState.Name(state)} at receipt {seq}, "
                    f"and is {types_pb2.ClaimState.Name(now.state)} at {now.ledger_seq} after the kill")
