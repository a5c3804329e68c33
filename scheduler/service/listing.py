"""List's speed (issue 23): a page of claims answered from each claim's
status encoded once, instead of one claim at a time through
ClaimsServicer.status (the plain twin this is tested against,
tests/service/test_listing.py, field for field).

Each claim's status is built once and kept as protobuf bytes while the claim
(an immutable value, replaced by every change), its receipt seq and its
principals stay the same. What moves while a claim waits without the claim
changing, its queue position and the reason it waits, is encoded apart and
appended to the kept bytes: protobuf reads a message's fields in any order,
so `body + tail` is the status with both set. A page of a repeated message
field is its elements one after another, each a tag and a length before the
element's bytes, so a page is those records joined (`page`): no status is
built or copied for a claim that did not change, when the queue moves or not.

A waiting claim's reason is asked of the committed state's PendingReasons once
per shape (or gang) and reused for the other claims of that shape: it judges
a claim by its shape (kernel/schedule.py), so every claim of a shape has the
same reason. Any other mapping (a test's) is asked claim by claim.

What a listing's pages share is worked out once per committed state: the
claim ids in order, each pending claim's queue position, the receipt seqs and
principals as plain dicts. `warm` encodes claims ahead of any List (the
scheduler does it for the open claims after start-up, between calls, off the
request path: service/claims.py). bench/cli.py measures it beside squeue.

A Watch's first statuses are the same records (`events`): a ClaimEvent's
`status` is field 1, length-delimited, as a page's `claims` is, so the event
is a claim's record with its time, position and kind after it, sent as bytes
(claims.add_to_server), tested against ClaimEvent(status=ClaimsServicer.status)
in tests/service/test_listing.py. A Watch pages the state it began at while
the listing moves on with later Lists: a kept record serves it only while it is
that state's too (the same claim object, seq and principals), a waiting
claim's reason and place are that state's, any other status is built of it."""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Iterator

from protos.pool.v1 import claims_pb2, types_pb2
from scheduler import kernel
from scheduler.kernel import Claim, ClaimState, PendingReasons, Reason
from scheduler.kernel.fast.pmap import MISSING, changes
from scheduler.kernel.fast.shapes import shape_of
from scheduler.service.committed import Committed
from scheduler.service.names import bare
from scheduler.service.wire import LENGTH_DELIMITED, VARINT, tag, varint

_PENDING, _REFUSED = ClaimState.PENDING, ClaimState.REFUSED
_UNSPECIFIED = Reason.REASON_UNSPECIFIED


CLAIMS_TAG = tag(claims_pb2.ListClaimsResponse, "claims", LENGTH_DELIMITED)
_REASON_TAG = tag(claims_pb2.ClaimStatus, "reason", VARINT)
_POSITION_TAG = tag(claims_pb2.ClaimStatus, "queue_position", VARINT)
_EVENT_TIME_TAG = tag(claims_pb2.ClaimEvent, "time_ns", VARINT)
_EVENT_POSITION_TAG = tag(claims_pb2.ClaimEvent, "position", VARINT)
_EVENT_KIND_TAG = tag(claims_pb2.ClaimEvent, "kind", VARINT)
_REASONS = {reason: _REASON_TAG + varint(reason) if reason else b"" for reason in Reason}   # 0: left out
_LENGTHS = [varint(n) for n in range(1 << 10)]   # a status's length, mostly (else varint)


class Listing:
    """Every claim's status encoded once, and what every page of a List over
    one committed view shares."""

    def __init__(self) -> None:
        self._committed: Committed | None = None
        self._ids: list[str] = []
        self._claims: dict[str, Claim] = {}
        self._positions: dict[str, int] = {}
        self._seqs: dict[str, int] = {}
        self._submitted_by: dict[str, str] = {}
        self._released_by: dict[str, str] = {}
        # claim id -> what is kept of its status while the claim (and its receipt seq and principals,
        # whose changes `_of` drops it for) stand still: for any claim but a waiting one, (the claim,
        # its seq, the whole record of a page (tag, length, status), None); for a waiting one, [the
        # claim, its seq, the status without reason and queue position, the number `_kinds` gives its
        # shape (or gang id), that shape, and the reason field, position and record it last had].
        self._made: dict[str, tuple] = {}
        self._kinds: dict[object, int] = {}    # shape or gang id -> a number (a Shape's hash is slow: enums)
        self._reasons: object = None           # the pending reasons `_judged` was asked of
        self._judged: dict[int, bytes] = {}    # kind -> the reason field, as `_reasons` says
        self._places: list[bytes] = [b""]      # queue position n -> its field (0: none)

    def _of(self, committed: Committed) -> None:
        if committed is self._committed:
            return
        state, before = committed.state, self._committed
        if before is None:
            self._claims = state.claims.to_dict()
            self._ids = sorted(self._claims)
            self._seqs = committed.claim_seq.to_dict()
            self._submitted_by = committed.submitted_by.to_dict()
            self._released_by = committed.released_by.to_dict()
        else:   # only what changed since the state seen last (pmap.changes: the paths they do not share)
            if state is not before.state:
                ids, claims = self._ids, self._claims
                for claim_id, _, claim in changes(before.state.claims, state.claims):
                    if claim is MISSING:
                        del claims[claim_id]
                        del ids[bisect_left(ids, claim_id)]
                    else:
                        if claim_id not in claims:
                            insort(ids, claim_id)
                        claims[claim_id] = claim
            made = self._made
            for mine, were, now in ((self._seqs, before.claim_seq, committed.claim_seq),
                                    (self._submitted_by, before.submitted_by, committed.submitted_by),
                                    (self._released_by, before.released_by, committed.released_by)):
                for claim_id, _, value in changes(were, now):
                    made.pop(claim_id, None)   # its status shows these: made again when next listed
                    if value is MISSING:
                        del mine[claim_id]
                    else:
                        mine[claim_id] = value
        if before is None or state is not before.state:
            self._positions = {key[-1]: n for n, key in enumerate(state.pending, 1)}
            if len(self._made) > 2 * len(self._claims) + 1000:   # statuses of claims long gone
                self._forget(self._claims)
            places = self._places
            places += (_POSITION_TAG + varint(n) for n in range(len(places), len(self._positions) + 1))
        self._committed = committed

    def after(self, committed: Committed, claim_id: str) -> Iterator[Claim]:
        """Every claim of the committed state whose id is above `claim_id` ("" for all), in id order."""
        self._of(committed)
        return map(self._claims.__getitem__, self._ids[bisect_right(self._ids, claim_id):] if claim_id else self._ids)

    def keys_after(self, committed: Committed, claim_id: str, most: int) -> list[str]:
        """Up to `most` claim keys above `claim_id` ("" for the first), in key order, as
        the latest state this listing was brought to has them (`committed`'s if none
        was yet). A Watch pages the state it began at by these keys without bringing
        the listing back to that state (which every later listing would then diff
        forward again): keys only come and go, so the next keys after a cursor are
        the same in any later state but for claims that state added or dropped."""
        if self._committed is None:
            self._of(committed)
        ids = self._ids
        at = bisect_right(ids, claim_id) if claim_id else 0
        return ids[at:at + most]

    def shows(self, committed: Committed) -> bool:
        """Whether the listing is at `committed` now (its statuses are that state's)."""
        return self._committed is committed

    def statuses(self, committed: Committed, claims: Iterable[Claim]) -> list[claims_pb2.ClaimStatus]:
        """What ClaimsServicer.status answers for each of `claims` (claims of the committed state)."""
        return list(claims_pb2.ListClaimsResponse.FromString(self.page(committed, claims)[0]).claims)

    def warm(self, committed: Committed, claims: Iterable[Claim]) -> int:
        """Encode those of `claims` not encoded as they are now, and their records as a page
        would have them, ahead of a List; how many statuses were encoded."""
        claims = list(claims)
        self._of(committed)
        made = self._made
        fresh = sum(1 for c in claims if (kept := made.get(c.spec.claim_id)) is None or kept[0] is not c)
        self.page(committed, claims)   # encodes them, and each waiting claim's record as it stands
        return fresh

    def page(self, committed: Committed, claims: Iterable[Claim], most: int = 0, budget: int = 0
             ) -> tuple[bytes, str | None]:
        """ListClaimsResponse's `claims` field holding what ClaimsServicer.status
        answers for each of `claims` (claims of the committed state), encoded: for
        the first `most` of them (0: all), ending after the status that reaches
        `budget` bytes (0: no end); and the id of the last claim in it (None if none).
        An iterator of claims is read no further than the last."""
        out: list[bytes] = []
        n, size, claim_id = 0, 0, None
        for claim_id, record in self._records(committed, claims):
            out.append(record)
            size += len(record)
            n += 1
            if n == most or budget and size >= budget:
                break
        return b"".join(out), claim_id

    def _records(self, committed: Committed, claims: Iterable[Claim]) -> Iterator[tuple[str, bytes]]:
        """Each claim's id and its record as a page has it (the listing brought to `committed`)."""
        self._of(committed)
        positions, seqs, made, places = self._positions, self._seqs, self._made, self._places
        reasons = committed.pending_reason
        if reasons is not self._reasons:
            self._reasons, self._judged = reasons, {}
        judged = self._judged if isinstance(reasons, PendingReasons) else None   # by shape only there
        for claim in claims:
            claim_id = claim.spec.claim_id
            kept = made.get(claim_id)
            if kept is None or kept[0] is not claim:
                kept = made[claim_id] = self._made_of(claim, seqs.get(claim_id, 0))
            kind = kept[3]
            if kind is None:   # not waiting: the record as kept
                yield claim_id, kept[2]
                continue
            if judged is None:
                reason = _REASONS[reasons.get(claim_id, _UNSPECIFIED)]
            else:
                reason = judged.get(kind)
                if reason is None:
                    reason = judged[kind] = _REASONS[reasons.get(claim_id, _UNSPECIFIED)]
            position = positions.get(claim_id, 0)
            if kept[5] is not reason or kept[6] != position:   # not as the last listing had it
                kept[5], kept[6], kept[7] = reason, position, _record(kept[2], reason + places[position])
            yield claim_id, kept[7]

    def events(self, committed: Committed, claims: Iterable[Claim], time_ns: int, position: int,
               kind: int) -> list[bytes]:
        """ClaimEvent, encoded, for each of `claims` (claims of the committed state):
        the status ClaimsServicer.status(claim id, committed) gives, with `time_ns`,
        `position` and `kind`. A ClaimEvent's `status` is field 1, length-delimited,
        as ListClaimsResponse's `claims` is, so a page's record of a claim is the
        event's status field, and the event that record and the three fields after it.

        `committed` may be a state the listing has moved past (a Watch pages the
        state it began at while Lists bring the listing to later ones): the listing
        stays where it is, and a kept record is reused only when it was made of the
        same claim (the same object: claims are immutable values, replaced by every
        change) with the receipt seq and principals `committed` gives it; a waiting
        claim's reason and queue position are `committed`'s; any other claim's
        status is built here, of `committed`, and not kept."""
        suffix = _EVENT_TIME_TAG + varint(time_ns)
        if position:   # zeros are left out, as protobuf leaves them
            suffix += _EVENT_POSITION_TAG + varint(position)
        if kind:
            suffix += _EVENT_KIND_TAG + varint(kind)
        if committed is self._committed or self._committed is None:
            return [record + suffix for _, record in self._records(committed, claims)]
        return [record + suffix for record in self._then(committed, claims)]

    def _then(self, committed: Committed, claims: Iterable[Claim]) -> Iterator[bytes]:
        """Each claim's record as of `committed`, a state other than the listing's."""
        state, seqs, made, places = committed.state, committed.claim_seq, self._made, self._places
        submitted, released = committed.submitted_by, committed.released_by
        mine_submitted, mine_released = self._submitted_by, self._released_by
        reasons = committed.pending_reason
        for claim in claims:
            claim_id = claim.spec.claim_id
            seq, by, ended_by = seqs.get(claim_id, 0), submitted.get(claim_id), released.get(claim_id)
            kept = made.get(claim_id)
            # every kept record was made with the listing's own seq and principals (`_of` drops it when
            # they change): the same as `committed`'s, and the same claim, and it is this state's too
            if kept is None or kept[0] is not claim or kept[1] != seq or mine_submitted.get(claim_id) != by \
                    or mine_released.get(claim_id) != ended_by:
                kept = _made(claim, seq, by, ended_by)
            if kept[3] is None:   # not waiting: the whole record
                yield kept[2]
                continue
            reason = _REASONS[reasons.get(claim_id, _UNSPECIFIED)]
            position = kernel.queue_position(state, claim)
            yield _record(kept[2], reason + (places[position] if position < len(places) else
                                             _POSITION_TAG + varint(position)))

    def _made_of(self, claim: Claim, seq: int) -> tuple | list:
        claim_id = claim.spec.claim_id
        kept = _made(claim, seq, self._submitted_by.get(claim_id), self._released_by.get(claim_id))
        if kept[3] is None:
            return kept
        # a waiting claim's: a list, its last record kept with the reason and position it was made with
        return [*kept[:3], self._kinds.setdefault(kept[3], len(self._kinds)), kept[3], None, 0, b""]

    def _forget(self, claims: dict[str, Claim]) -> None:
        """Keep only the statuses of `claims`, and the kinds they use (numbered again)."""
        self._made = {c: made for c, made in self._made.items() if c in claims}
        self._kinds, self._reasons, self._judged = {}, None, {}
        for kept in self._made.values():
            if kept[3] is not None:
                kept[3] = self._kinds.setdefault(kept[4], len(self._kinds))


def _record(body: bytes, tail: bytes) -> bytes:
    """A page's record of a waiting claim: its kept status with the reason and position fields after it."""
    length = len(body) + len(tail)
    return CLAIMS_TAG + (_LENGTHS[length] if length < 1024 else varint(length)) + body + tail


def _made(claim: Claim, seq: int, submitted_by: str | None, released_by: str | None) -> tuple:
    """What Listing keeps of a claim (Listing._made)."""
    spec, state = claim.spec, claim.state
    if state is _PENDING:
        reason = _UNSPECIFIED   # set per listing, in the tail
    elif state is _REFUSED:
        reason = claim.reason
    else:
        reason = kernel.headline(claim)
    status = claims_pb2.ClaimStatus(
        claim_id=bare(spec.claim_id), tenant=spec.tenant, state=state, reason=reason, hold_uj=claim.hold_uj,
        ledger_seq=seq, request=_request(spec), submitted_ns=claim.submitted_ns)
    if claim.hold_grade is not None:
        status.hold_grade = claim.hold_grade
    if claim.settled_ns:
        status.ended_ns = claim.settled_ns
        status.measured_uj = claim.settled_uj
        if claim.settled_grade is not None:
            status.measured_grade = claim.settled_grade
    else:
        status.measured_uj = claim.measured_uj
        if claim.measured_grade is not None:
            status.measured_grade = claim.measured_grade
    if claim.worker:
        status.worker = claim.worker
        status.admitted_ns = claim.admitted_ns
        for share in claim.devices:
            status.devices_mdev[share.device_id] = share.mdev
    elif claim.admitted_ns:
        status.admitted_ns = claim.admitted_ns
    if claim.completed_units:
        status.completed_units = claim.completed_units
    if claim.overrun:
        status.overrun = True
    if claim.bound:
        status.bound = True
    if claim.borrowed:
        status.borrowed = True
        status.borrowed_uj = claim.borrowed_uj
    if spec.gang_id:
        status.gang_id = bare(spec.gang_id)
    if spec.priority:
        status.priority = spec.priority
    if submitted_by:
        status.submitted_by = submitted_by
    if released_by:
        status.released_by = released_by
    body = status.SerializeToString()
    if state is _PENDING:
        return claim, seq, body, spec.gang_id or shape_of(spec)
    return claim, seq, CLAIMS_TAG + varint(len(body)) + body, None


def _request(spec: kernel.ClaimSpec) -> claims_pb2.SubmitRequest:
    """convert.submit_request, with only the fields that are set."""
    r = spec.resources
    request = claims_pb2.SubmitRequest(claim_id=bare(spec.claim_id), tenant=spec.tenant, placement=spec.placement,
                                       resources=types_pb2.Resources(
                                           cpu_millis=r.cpu_millis, memory_mb=r.memory_mb, disk_mb=r.disk_mb,
                                           gpu_mdev=r.gpu_mdev, gpu_types=r.gpu_types))
    if spec.estimate_uj is not None:
        request.estimate_uj = spec.estimate_uj
    if spec.gang_id:
        request.gang_id = bare(spec.gang_id)
        request.gang_size = spec.gang_size
    if spec.work_class:
        request.work_class = spec.work_class
    if spec.priority:
        request.priority = spec.priority
    return request
