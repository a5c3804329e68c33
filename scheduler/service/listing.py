"""List's speed (issue 23): the statuses of a page of claims built in one
pass over what every page of a listing shares, instead of one claim at a
time through ClaimsServicer.status (the plain twin this is tested against,
tests/service/test_listing.py, field for field).

What a listing's pages share is worked out once per committed state: the
claim ids in order, each pending claim's queue position (kernel.queue_position
searches the queue once per claim), and the claims, receipt seqs and
principals as plain dicts. A listing's later pages usually read the same
state, so the last state's are kept. A status is built with the fields that
are set only (a keyword per field costs as much whether it is zero or not),
and kept: the next listing reuses it while the claim (an immutable value,
replaced by every change), its receipt seq and principals are the same,
setting a waiting claim's queue position and reason in place when they
moved, so a queue that stands still, or only moves, is listed without
building a status again. A status returned is valid until the next call
(List and Watch copy it into their answers at once). bench/cli.py measures
both beside squeue."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator

from protos.pool.v1 import claims_pb2, types_pb2
from scheduler import kernel
from scheduler.kernel import Claim, ClaimState, Reason
from scheduler.service.committed import Committed
from scheduler.service.names import bare

_PENDING, _REFUSED = ClaimState.PENDING, ClaimState.REFUSED
_UNSPECIFIED = Reason.REASON_UNSPECIFIED


class Listing:
    """What every page of a List over one committed view shares."""

    def __init__(self) -> None:
        self._committed: Committed | None = None
        self._ids: list[str] = []
        self._claims: dict[str, Claim] = {}
        self._positions: dict[str, int] = {}
        self._seqs: dict[str, int] = {}
        self._submitted_by: dict[str, str] = {}
        self._released_by: dict[str, str] = {}
        # claim id -> (the claim, (seq, submitted by, released by), the pending reasons it was
        # judged with, its status); a kept status is changed in place when only its queue
        # position or pending reason moved, so it is valid until the next call: callers copy it
        self._made: dict[str, tuple] = {}

    def _of(self, committed: Committed) -> None:
        if committed is self._committed:
            return
        state = committed.state
        if self._committed is None or state is not self._committed.state:
            self._claims = state.claims.to_dict()
            self._ids = sorted(self._claims)
            self._positions = {key[-1]: n for n, key in enumerate(state.pending, 1)}
            if len(self._made) > 2 * len(self._claims) + 1000:   # statuses of claims long gone
                self._made = {c: made for c, made in self._made.items() if c in self._claims}
        self._seqs = committed.claim_seq.to_dict()
        self._submitted_by = committed.submitted_by.to_dict()
        self._released_by = committed.released_by.to_dict()
        self._committed = committed

    def after(self, committed: Committed, claim_id: str) -> Iterator[Claim]:
        """Every claim of the committed state whose id is above `claim_id` ("" for all), in id order."""
        self._of(committed)
        return map(self._claims.__getitem__, self._ids[bisect_right(self._ids, claim_id):] if claim_id else self._ids)

    def statuses(self, committed: Committed, claims: Iterable[Claim]) -> list[claims_pb2.ClaimStatus]:
        """What ClaimsServicer.status answers for each of `claims` (claims of the committed state),
        valid until the next call: copy them before anything else may list."""
        self._of(committed)
        positions, seqs, submitted_by, released_by = self._positions, self._seqs, self._submitted_by, \
            self._released_by
        reasons, made = committed.pending_reason, self._made
        out = []
        for claim in claims:
            claim_id, spec, state = claim.spec.claim_id, claim.spec, claim.state
            key = (seqs.get(claim_id, 0), submitted_by.get(claim_id), released_by.get(claim_id))
            before = made.get(claim_id)
            if before is not None and before[0] is claim and before[1] == key:
                status = before[3]
                if state is _PENDING:   # what moves while a claim waits: its place, its reason
                    position = positions.get(claim_id, 0)
                    if status.queue_position != position:
                        status.queue_position = position
                    if before[2] is not reasons:   # another decision: the reason it waits, as judged
                        reason = reasons.get(claim_id, _UNSPECIFIED)
                        if status.reason != reason:
                            status.reason = reason
                        made[claim_id] = (claim, key, reasons, status)
                out.append(status)
                continue
            if state is _PENDING:
                reason = reasons.get(claim_id, _UNSPECIFIED)
            elif state is _REFUSED:
                reason = claim.reason
            else:
                reason = kernel.headline(claim)
            status = claims_pb2.ClaimStatus(
                claim_id=bare(claim_id), tenant=spec.tenant, state=state, reason=reason, hold_uj=claim.hold_uj,
                ledger_seq=key[0], request=_request(spec), submitted_ns=claim.submitted_ns,
                queue_position=positions.get(claim_id, 0))
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
            if key[1]:
                status.submitted_by = key[1]
            if key[2]:
                status.released_by = key[2]
            made[claim_id] = (claim, key, reasons, status)
            out.append(status)
        return out


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

