"""Claims.Plan runs its preview off the event loop (service/claims.py): while
a Plan is being worked out, the loop goes on serving other calls, and the
answer is the one the preview on the loop gives."""

from __future__ import annotations

import asyncio
import threading

from protos.pool.v1 import claims_pb2, types_pb2
from scheduler.service.claims import ClaimsServicer
from scheduler.service.config import Limits
from scheduler.service.engine import Engine
from scheduler.service.principal import Principal, reset_caller, set_caller

from .test_engine import close, drive, opened

REQUEST = claims_pb2.PlanRequest(claims=[
    claims_pb2.SubmitRequest(claim_id=f"p{i}", tenant="a", estimate_uj=10,
                             resources=types_pb2.Resources(gpu_mdev=500)) for i in range(6)])


def test_the_loop_serves_other_calls_while_a_plan_is_worked_out(tmp_path, monkeypatch):
    previewed = Engine.previewed
    started, go = threading.Event(), threading.Event()
    where: list[str] = []

    def held(latest, judge, now_ns):   # the preview, held until the loop has served a Get meanwhile
        where.append(threading.current_thread().name)
        started.set()
        assert go.wait(10), "the event loop never served the Get while the Plan was being worked out"
        return previewed(latest, judge, now_ns)

    async def run() -> None:
        engine, steward = opened(tmp_path / "ledger.sqlite")
        await drive(engine, [("submit", "a", 10, 1000, 0), ("submit", "b", 10, 1000, 0)] * 2)
        servicer = ClaimsServicer(engine, Limits())
        token = set_caller(Principal("someone", "operator"))
        try:
            expected = await ClaimsServicer.Plan.__wrapped__(servicer, REQUEST, None)   # not held
            monkeypatch.setattr(Engine, "previewed", staticmethod(held))
            plan = asyncio.create_task(ClaimsServicer.Plan.__wrapped__(servicer, REQUEST, None))
            while not started.is_set():
                await asyncio.sleep(0.01)
            got = await ClaimsServicer.Get.__wrapped__(servicer, claims_pb2.GetClaimRequest(claim_id="c0"), None)
            assert got.claim_id == "c0"
            go.set()
            answer = await plan
        finally:
            reset_caller(token)
        assert where and where[0] != threading.current_thread().name   # not the loop's thread
        assert answer == expected and len(answer.claims) == len(REQUEST.claims)
        await close(engine, steward)

    asyncio.run(run())
