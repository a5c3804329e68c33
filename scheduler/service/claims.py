"""The Claims service: submit, progress, release, get, list, watch.

Decisions are made on the engine's latest state; every answer, and every
read, is taken from the committed state (committed.py), so nothing a client
is shown can be taken back by a crash."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
from google.protobuf.message_factory import GetMessageClass


from protos.limits import SUBMIT_MANY_MAX
from protos.pool.v1 import claims_pb2, claims_pb2_grpc, types_pb2
from scheduler import kernel
from scheduler.kernel import Claim, ClaimState, ClusterState, Reason
from scheduler.kernel.fast.edit import Edit
from scheduler.service import convert, names, pages
from scheduler.service.config import Limits
from scheduler.service.committed import Committed
from scheduler.service.engine import Change, Engine
from scheduler.service.errors import Refused, abort, checked, guarded, not_ready
from scheduler.service.limits import Admission, OpenClaims, RateLimiter, limit_refusal
from scheduler.service.listing import Listing
from scheduler.service.wire import LENGTH_DELIMITED, delimited, tag
from scheduler.service.principal import caller
from scheduler.service.state import ServiceState

_TOKEN_TAG = tag(claims_pb2.ListClaimsResponse, "next_page_token", LENGTH_DELIMITED)
LIST_PAGE_BYTES = 1 << 20   # a List page's statuses at most (one more status past it): far below 4 MiB
WARM_CHUNK = 250   # claims encoded at a time by warm_listing, between calls (~5 ms)
WATCH_PAGE = 200   # statuses a Watch reads from the committed state at a time, before it sends them
PLAN_WORKERS = 8   # worker rows per explanation in a Plan answer (its 1,000 claims' rows stay within a message)
# where Plans run, one at a time, off the event loop (ClaimsServicer.Plan): one thread, so that
# Plans queue behind each other instead of taking more of the GIL from the loop
_PLANNER = ThreadPoolExecutor(1, thread_name_prefix="pool-plan")
log = logging.getLogger("pool.scheduler")
RESUME_FROM = "pool-resume-from"   # WATCH_LAGGED's trailing metadata: the position to watch again from

# receipt kind -> what a watcher is told happened
EVENT_KINDS = {"claim_submitted": claims_pb2.EVENT_SUBMITTED, "claim_admitted": claims_pb2.EVENT_ADMITTED,
               "progress": claims_pb2.EVENT_PROGRESS, "released": claims_pb2.EVENT_RELEASED,
               "preempted": claims_pb2.EVENT_PREEMPTED, "reclaimed": claims_pb2.EVENT_RECLAIMED,
               "claim_refused": claims_pb2.EVENT_REFUSED}
def subtree(state: ClusterState, tenant: str) -> frozenset[str] | None:
    """A tenant and every node under it (None for "all"); UNKNOWN_TENANT if absent."""
    if not tenant:
        return None
    tree = state.tree
    if tree is None or tenant not in tree.nodes:
        raise Refused("UNKNOWN_TENANT", f"tenant {tenant!r} is not in the tree")
    return frozenset(n for n in tree.nodes if tenant in tree.path(n))


class ClaimsServicer(claims_pb2_grpc.ClaimsServicer):
    def __init__(self, engine: Engine, limits: Limits = Limits()) -> None:
        self.engine, self.limits = engine, limits
        self._watchers: set[Watcher] = set()
        self._rates = RateLimiter(limits.submits_per_s, limits.submit_burst)
        # per principal: its Watches' first statuses a second, with a second's worth at once (_paced)
        self._first_statuses = RateLimiter(limits.watch_statuses_per_s, limits.watch_statuses_per_s)
        self.admission = Admission({})   # the scheduler's (main.py): whose turn a Watch page takes
        self.open = OpenClaims(limits.max_open_claims_per_tenant)   # counted from the state when serving starts
        self._listing = Listing()   # what List's pages share, per committed state (listing.py)
        engine.listen(self._publish)
        engine.listen(lambda change: self.open.changed(self.engine.read().state, change.claims))

    def status(self, claim_id: str, committed: Committed | None = None) -> claims_pb2.ClaimStatus:
        """A claim as the committed state has it, by its key (names.py; UNKNOWN_CLAIM if it has none)."""
        committed = committed or self.engine.read()
        claim = committed.state.claim(claim_id)
        if claim is None:
            raise Refused("UNKNOWN_CLAIM", f"no claim {names.bare(claim_id)!r}")
        reason = kernel.headline(claim, committed.pending_reason.get(claim_id, Reason.REASON_UNSPECIFIED))
        status = convert.claim_status(claim, committed.claim_seq.get(claim_id, 0), reason,
                                      kernel.queue_position(committed.state, claim))
        status.submitted_by = committed.submitted_by.get(claim_id, "")
        status.released_by = committed.released_by.get(claim_id, "")
        return status

    @guarded
    async def Submit(self, request, context):
        [answer] = await self._submit([request])
        if isinstance(answer, Refused):
            raise answer
        return self.status(answer)

    @guarded
    async def SubmitMany(self, request, context):
        if len(request.claims) > SUBMIT_MANY_MAX:
            raise Refused("INVALID_ARGUMENT", f"claims: at most {SUBMIT_MANY_MAX} claims per call, "
                                              f"got {len(request.claims)}")
        self._check_submissions_left()
        answers = await self._submit(request.claims)
        for refusal in answers:
            if isinstance(refusal, Refused):
                self.engine.on_refused(refusal.code)
        committed = self.engine.read()
        return claims_pb2.SubmitManyResponse(results=[
            claims_pb2.SubmitResult(status=self.status(answer, committed)) if not isinstance(answer, Refused) else
            claims_pb2.SubmitResult(refused=claims_pb2.Refusal(code=types_pb2.ErrorCode.Value(answer.code),
                                                               message=str(answer)))
            for answer in answers])

    async def _submit(self, requests) -> list[Refused | str]:
        """The one door for submissions: check each request in order against
        the latest state with the accepted ones before it added, decide the
        accepted ones together (one pass, one group commit), and return once
        every answer is durable; per request, the claim's key (names.py) or
        why it was refused."""
        now = time.time_ns()
        accepted: list[kernel.ClaimSubmitted] = []
        answers: list[Refused | str] = []
        try:
            await self.engine.decide(lambda latest: self._accepted(latest.kernel, requests, now, accepted, answers),
                                     now)
        finally:   # a decision that did not go through leaves its claims uncounted again
            self.open.changed(self.engine.read().state, (a.spec.claim_id for a in accepted))
        return answers

    def _accepted(self, state: kernel.ClusterState, requests, now: int, accepted: list[kernel.ClaimSubmitted],
                  answers: list[Refused | str]) -> list[kernel.ClaimSubmitted]:
        """The submissions among `requests` the latest `state` accepts, in
        order, each checked with the accepted ones before it added (into
        `accepted`), and per request its key or why it was refused (into
        `answers`)."""
        # the states checked against are this loop's own, thrown away after it (decide applies
        # the accepted claims again, to the engine's state): one edit batch, each path copied
        # once, and nothing applied after the last request (a lone Submit applies nothing here)
        last = len(requests) - 1
        limited: Refused | None = None   # once one is past the caller's rate, the rest are too, unjudged
        with Edit():
            for at, request in enumerate(requests):
                if limited is not None:
                    answers.append(limited)
                    continue
                try:
                    spec = names.spec(state, convert.spec_from(request))
                    answer = checked(kernel.submit(state, spec, now))
                    if isinstance(answer, kernel.ClaimSubmitted):
                        self._admit_submission(answer.spec.tenant)
                except Refused as refusal:
                    answers.append(refusal)
                    if refusal.code == "RATE_LIMITED":
                        limited = refusal
                    continue
                answers.append(spec.claim_id)
                if isinstance(answer, kernel.ClaimSubmitted):   # else an identical resubmission: its original answer
                    if at < last:
                        state = kernel.apply(state, answer)
                    accepted.append(answer)
                    self.open.opened(answer.spec.tenant, answer.spec.claim_id)
        return accepted

    def _admit_submission(self, tenant: str) -> None:
        """The stated limits on a new claim: its tenant's open claims, the caller's rate."""
        if self.open.full(tenant):
            raise Refused("TOO_MANY_OPEN_CLAIMS", f"tenant {tenant!r} has {self.open.count(tenant)} open claims, "
                                                  f"the most allowed (limits.max_open_claims_per_tenant)")
        self._charge_submissions(1)

    def _submission_rate(self) -> tuple[str, int, int]:
        """The caller's name, its submissions a second and their burst."""
        principal = caller()
        rate, burst = self.limits.submits_per_s, self.limits.submit_burst
        if principal.submits_per_s is not None:
            rate = principal.submits_per_s
            burst = min(burst, 10 * rate) or burst
        return principal.name, rate, burst

    def _check_submissions_left(self) -> None:
        """A SubmitMany while the caller has no submission left is refused RATE_LIMITED
        whole, before its claims are judged: each would be refused so, and judging them
        cost a tenant looping on SubmitMany ~8 ms of the loop a call in the soak (its
        idempotent resubmissions answer once a submission is there again)."""
        name, rate, burst = self._submission_rate()
        _rate_limited(name, rate, self._rates.empty_s(name, time.monotonic(), rate, burst))

    def _charge_submissions(self, n: int) -> None:
        """Take `n` of the caller's submissions a second (RATE_LIMITED when they are not there)."""
        name, rate, burst = self._submission_rate()
        _rate_limited(name, rate, self._rates.wait_s(name, n, time.monotonic(), rate, burst))

    @guarded
    async def Plan(self, request, context):
        """Submit's own path on a scratch state: kernel.submit for each claim
        against the latest state, then the engine's decision, previewed
        instead of committed. Nothing is recorded. The preview is a pure
        function of an immutable state, so it runs on the plan thread, not on
        the event loop: a Plan of 1,000 claims is ~0.7 s of the kernel on a
        state of 50,000 claims, which on the loop every other call would wait
        behind, and which the thread gives up every few milliseconds (Python's
        switch interval) while the loop has work."""
        if not request.claims:
            raise Refused("INVALID_ARGUMENT", "claims: give at least one claim to plan")
        if len(request.claims) > SUBMIT_MANY_MAX:
            raise Refused("INVALID_ARGUMENT", f"claims: at most {SUBMIT_MANY_MAX} claims per plan, "
                                              f"got {len(request.claims)}")
        self._charge_submissions(len(request.claims))   # a plan costs the decisions a submission does
        loop = asyncio.get_running_loop()
        # the caller's context goes with it (caller(): names resolve in its reach)
        return await loop.run_in_executor(_PLANNER, contextvars.copy_context().run, self._plan, request,
                                          self.engine.read_latest(), time.time_ns())

    @staticmethod
    def _plan(request, latest: ServiceState, now: int) -> claims_pb2.PlanResponse:
        """Plan's answer for `request` on `latest` (the engine's latest state as the call found it)."""
        live, decision = latest.kernel, Engine.previewed(latest, lambda latest: _planned(latest.kernel,
                                                                                          request.claims, now), now)
        planned = [names.spec(live, convert.spec_from(r)).claim_id for r in request.claims]
        state = decision.state if decision else live
        # why a planned claim would wait: its verdict on the state the decision leaves, as Get would say
        reasons = kernel.PendingReasons(state)
        answer = claims_pb2.PlanResponse()
        for claim_id in planned:
            claim = state.claims[claim_id]
            status = convert.claim_status(claim, latest.claim_seq.get(claim_id, 0),
                                          kernel.headline(claim, reasons.get(claim_id, Reason.REASON_UNSPECIFIED)),
                                          kernel.queue_position(state, claim))
            if claim_id not in live.claims:   # nothing was recorded: no receipt, no times
                status.submitted_ns = status.admitted_ns = 0
            answer.claims.append(status)
            if claim.state is ClaimState.PENDING:
                answer.explanations.append(convert.explanation(kernel.explain(state, claim_id, now, PLAN_WORKERS),
                                                               claim.tenant))
        for event in decision.events if decision else ():
            if isinstance(event, kernel.Preempted) and event.by_claim in planned:
                answer.victims.append(convert.planned_victim(live.claims[event.claim_id], state.claims[event.by_claim]))
        return answer

    @guarded
    async def Progress(self, request, context):
        """The count is cumulative: a report of the count the claim already has
        records nothing and answers its status (so sending one again is safe)."""
        named: list[str] = []   # the claim's key, as the latest state resolves the name
        await self.engine.record(lambda latest: [e for e in [checked(kernel.progress(
            latest.kernel, _named(latest.kernel, request, named), request.completed_units))] if e is not None],
            time.time_ns())
        return self.status(named[0])

    @guarded
    async def Release(self, request, context):
        """A Release sent again by the principal whose Release ended the claim
        (its first answer lost) answers the claim's status as the first would
        have; anyone else's, or a claim that ended otherwise, CLAIM_NOT_OPEN."""
        now, named = time.time_ns(), []
        who = caller().name
        await self.engine.decide(lambda latest: _released(latest, _named(latest.kernel, request, named), who, now),
                                 now)
        return self.status(named[0])

    @guarded
    async def Bind(self, request, context):
        """RULES §10 (kernel/binding.py): a claim bound to the devices its job was given."""
        now, devices, named = time.time_ns(), tuple(request.device_ids), []
        if request.dry_run:   # the binding the latest state would give, recorded nowhere
            latest = self.engine.preview(lambda latest: [], now)[0].kernel
            key = _named(latest, request, named)
            event = checked(kernel.bind(latest, key, devices))
            if event is None:
                return self.status(key)
            claim = kernel.apply(latest, event).claims[key]
            return convert.claim_status(claim, 0, kernel.headline(claim), 0)
        await self.engine.decide(lambda latest: [e for e in [checked(kernel.bind(
            latest.kernel, _named(latest.kernel, request, named), devices))] if e is not None], now)
        return self.status(named[0])

    @guarded
    async def Get(self, request, context):
        committed = self.engine.read()
        return self.status(_named(committed.state, request), committed)

    @guarded
    async def List(self, request, context):
        """A page: at most page_size claims (0: limits.list_page_size), ending early at
        LIST_PAGE_BYTES of statuses, in claim id order; the token is the last id sent."""
        return claims_pb2.ListClaimsResponse.FromString(self._list(request))

    @guarded
    async def list_encoded(self, request, context):
        """List's answer as grpc sends it: what add_to_server serves List with (the page
        listing.py joined, not read back into a message and serialized again)."""
        return self._list(request)

    def _list(self, request: claims_pb2.ListClaimsRequest) -> bytes:
        size = pages.page_size(request.page_size, self.limits, self.limits.list_page_size)
        committed = self.engine.read()
        states = frozenset(ClaimState(convert.known(types_pb2.ClaimState, s, "states")) for s in request.states)
        matching = self._matching(committed, subtree(committed.state, request.tenant), states, request.page_token)
        encoded, last = self._listing.page(committed, matching, size, LIST_PAGE_BYTES)
        if last is not None and next(matching, None) is not None:
            encoded += delimited(_TOKEN_TAG, last.encode())
        return encoded

    async def warm_listing(self, chunk: int = WARM_CHUNK) -> int:
        """After start-up (main.py), between calls: the open claims' statuses encoded
        ahead of the first List (listing.py), `chunk` claims at a time, yielding to the
        event loop after each chunk so that no call waits behind more than one chunk.
        A List that comes first encodes what is not yet; each claim is encoded once
        either way. Logs how many and how long; returns how many."""
        started = time.monotonic()
        state = self.engine.read().state
        ids = [key[-1] for key in state.pending] + kernel.admitted_ids(state)
        encoded = 0
        for at in range(0, len(ids), chunk):
            committed = self.engine.read()   # the latest each time: a claim changed since is encoded as it is
            claims = committed.state.claims
            encoded += self._listing.warm(committed, [c for c in map(claims.get, ids[at:at + chunk]) if c is not None])
            await asyncio.sleep(0)
        log.info("listing: %d open claims' statuses encoded in %.2f s, between calls", encoded,
                 time.monotonic() - started)
        return encoded

    def _matching(self, committed: Committed, tenants: frozenset[str] | None, states: frozenset[ClaimState],
                  after: str = "") -> Iterator[Claim]:
        """Matching claims in id order, those after `after` (a page token: the last id sent)."""
        claims = self._listing.after(committed, after)
        if states:   # as a tuple: `in` finds a state by identity first (an enum's own hash is Python code)
            wanted = tuple(states)
            claims = (claim for claim in claims if claim.state in wanted)
        return claims if tenants is None else (claim for claim in claims if claim.tenant in tenants)

    async def Watch(self, request, context):
        """The ClaimEvents watch_encoded gives, as messages (its encoded ones read back)."""
        events = self.watch_encoded(request, context)
        try:
            async for event in events:
                yield claims_pb2.ClaimEvent.FromString(event) if type(event) is bytes else event
        finally:
            await events.aclose()

    async def watch_encoded(self, request, context):
        """Watch as grpc sends it (add_to_server): the statuses first
        (EVENT_CURRENT: every watched claim, or with resume_from only those
        changed since), a page at a time from the committed state the watch
        began at; then live events from a Watcher,
        which holds at most limits.watch_events events and limits.watch_bytes
        bytes: one that fills is emptied and the call ends WATCH_LAGGED with
        the position to resume from. Memory per Watch: a page and the Watcher
        (the claim ids in order are shared by every listing of a state). The
        first statuses go out as the bytes listing.py encodes (one ClaimEvent
        each), the live events as messages."""
        try:
            if not self.engine.ready:
                raise not_ready(self.engine)
            committed = self.engine.read()
            if request.resume_from > committed.length:
                raise Refused("INVALID_ARGUMENT", f"resume_from: {request.resume_from} is past the ledger's "
                                                  f"length {committed.length}")
            one = None
            if request.WhichOneof("target") == "claim_id":
                one = names.resolve(committed.state, request.claim_id, request.claim_tenant, caller())
                matches: Callable[[Claim], bool] = lambda c: c.claim_id == one  # noqa: E731
            else:
                tenants = subtree(committed.state, request.tenant)
                matches = lambda c: tenants is None or c.tenant in tenants  # noqa: E731
        except Refused as error:
            await abort(self.engine, context, error)
        watcher = Watcher(matches, self.limits.watch_events, self.limits.watch_bytes)
        self._watchers.add(watcher)
        began = position = committed.length
        try:
            # the statuses as of the committed state the watch began at (kept by reference: it shares
            # all but what changed since with the live one), a page at a time by a cursor over the
            # claim keys (from_now: none; only what changes from here)
            state, seqs = committed.state, committed.claim_seq
            self._listing.after(committed, "")   # brought forward to this state (never back: keys_after)
            cursor, done = "", request.from_now
            while not done:
                keys = [one] if one is not None else self._listing.keys_after(committed, cursor, WATCH_PAGE)
                done = one is not None or not keys
                cursor = keys[-1] if keys else cursor
                chosen = [c for c in map(state.claims.get, keys) if c is not None and matches(c)
                          and seqs.get(c.claim_id, 0) >= request.resume_from]
                await self._paced(len(chosen))
                async with self.admission.turn(caller()):   # each page in the caller's turn (limits.RUNNING)
                    # each status as Get gives it of this state, encoded as the event that carries it,
                    # from the shared listing's kept records where they are this state's (listing.events)
                    events = self._listing.events(committed, chosen, time.time_ns(), began,
                                                  claims_pb2.EVENT_CURRENT) if chosen else ()
                for event in events:
                    yield event
            while (event := await watcher.next()) is not None:
                position = event.position
                yield event
            await abort(self.engine, context, Refused(
                "WATCH_LAGGED", f"this watcher fell {watcher.behind} behind; watch again with resume_from = "
                                f"{position}", ((RESUME_FROM, str(position)),)))
        finally:
            self._watchers.discard(watcher)

    async def _paced(self, statuses: int) -> None:
        """Wait until the caller's Watches may send `statuses` more first statuses
        (limits.watch_statuses_per_s, the caller's Watches together): past it a Watch
        waits, it is not refused."""
        await self._first_statuses.paced(caller().name, statuses)

    def _publish(self, change: Change) -> None:
        # a watcher that lagged takes no more events (its Watch ends WATCH_LAGGED once it asks for the
        # next, which one stuck sending its first statuses to a client that does not read may never do)
        watchers = [w for w in self._watchers if not w.behind]
        if not watchers or not change.claims:
            return
        committed = self.engine.read()   # published just before the listeners are told
        changed = [committed.state.claims[c] for c in sorted(change.claims) if c in committed.state.claims]
        kinds = dict(change.kinds)
        events: dict[str, claims_pb2.ClaimEvent] = {}   # one event per claim, shared by its watchers
        for watcher in watchers:
            for claim in filter(watcher.matches, changed):
                event = events.get(claim.claim_id)
                if event is None:
                    event = events[claim.claim_id] = claims_pb2.ClaimEvent(
                        status=self.status(claim.claim_id, committed), time_ns=change.time_ns,
                        kind=EVENT_KINDS.get(kinds.get(claim.claim_id), 0), position=committed.length)
                watcher.offer(event)


class Watcher:
    """The events one Watch has yet to send, bounded in events and bytes:
    past either bound it is emptied at once and says it lagged (next: None)."""

    def __init__(self, matches: Callable[[Claim], bool], events: int, size: int) -> None:
        self.matches, self.events, self.size = matches, events, size
        self._queue: deque[tuple[claims_pb2.ClaimEvent, int]] = deque()   # (event, its size)
        self._bytes = 0
        self.behind = ""          # set once it lagged: by what
        self._ready = asyncio.Event()

    def offer(self, event: claims_pb2.ClaimEvent) -> None:
        if self.behind:
            return
        size = event.ByteSize()
        if len(self._queue) >= self.events or self._bytes + size > self.size:
            self.behind = (f"{len(self._queue)} events" if len(self._queue) >= self.events
                           else f"{self._bytes + size} bytes")
            self._queue.clear()
            self._bytes = 0
        else:
            self._queue.append((event, size))
            self._bytes += size
        self._ready.set()

    async def next(self) -> claims_pb2.ClaimEvent | None:
        while not self._queue and not self.behind:
            self._ready.clear()
            await self._ready.wait()
        if self.behind:
            return None
        event, size = self._queue.popleft()
        self._bytes -= size
        return event


def _rate_limited(name: str, rate: int, wait: float) -> None:
    """RATE_LIMITED for the caller `name` when it must `wait` for its submissions."""
    if wait:
        raise limit_refusal("RATE_LIMITED", f"{name!r} is over {rate} submissions a second "
                                            f"(limits.submits_per_s, or its own submits_per_s); "
                                            f"retry in {wait:.2f} s", wait)


def _named(state: kernel.ClusterState, request, into: list[str] | None = None) -> str:
    """The key of the claim a request names by its claim_id and tenant, in
    the caller's reach (names.resolve); kept in `into` for the answer."""
    key = names.resolve(state, request.claim_id, request.tenant, caller())
    if into is not None:
        into[:] = [key]
    return key


def _planned(state: kernel.ClusterState, requests, now: int) -> list[kernel.ClaimSubmitted]:
    """Plan's submissions, each checked on `state` with the ones before it added
    (an identical resubmission adds nothing: its current status is planned)."""
    first = []
    for r in requests:
        answer = checked(kernel.submit(state, names.spec(state, convert.spec_from(r)), now))
        if isinstance(answer, kernel.ClaimSubmitted):
            state = kernel.apply(state, answer)
            first.append(answer)
    return first


def _released(latest: ServiceState, claim_id: str, who: str, now: int) -> list[kernel.Event]:
    """Release's change on the latest state: none when `who` released the
    claim already (its first answer lost: the same answer again)."""
    if latest.released_by.get(claim_id) == who:
        return []
    return [checked(kernel.release(latest.kernel, claim_id, now))]


def add_to_server(servicer: ClaimsServicer, server: grpc.aio.Server) -> None:
    """claims_pb2_grpc.add_ClaimsServicer_to_server, but for List and Watch: List's answer
    goes out as the bytes ClaimsServicer.list_encoded gives, and Watch's first statuses as
    the bytes ClaimsServicer.watch_encoded gives (what the generated serializer would make
    of the messages, without building them); Watch's live events are messages."""
    service = claims_pb2.DESCRIPTOR.services_by_name["Claims"]
    handlers = {}
    for method in service.methods:
        make = grpc.unary_stream_rpc_method_handler if method.server_streaming else grpc.unary_unary_rpc_method_handler
        behaviour = getattr(servicer, method.name)
        serialize = GetMessageClass(method.output_type).SerializeToString
        if method.name == "List":
            behaviour, serialize = servicer.list_encoded, _as_encoded
        elif method.name == "Watch":
            behaviour, serialize = servicer.watch_encoded, _as_encoded
        handlers[method.name] = make(behaviour, request_deserializer=GetMessageClass(method.input_type).FromString,
                                     response_serializer=serialize)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)


def _as_encoded(answer: bytes | claims_pb2.ListClaimsResponse | claims_pb2.ClaimEvent) -> bytes:
    return answer if type(answer) is bytes else answer.SerializeToString()
