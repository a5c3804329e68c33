"""poolctl verbs for tenants' claims: submit (and --dry-run), progress,
release, claims (squeue-like: age, wait, queue position; one claim in
full), watch."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

import grpc

from protos.energy import Grade, format_uj
from protos.limits import SUBMIT_MANY_MAX
from protos.pool.v1 import claims_pb2, claims_pb2_grpc, types_pb2
from scheduler.ctl.output import (CUSTOM, EXIT_FAILED, EXIT_USAGE, CtlError, duration, emit, emit_line, fitted, int32,
                                  layout, moment, now_ns, output, row_line, table, uint32, uint64, utc, utc_s, yes_no)
from scheduler.ctl.wire import as_ctl_error, call, channel, default_tenant, grade_label, online_verb, pages, to_doc

_STATES = [v.name for v in types_pb2.ClaimState.DESCRIPTOR.values if v.number]
_SORTS = ("queue", "age", "priority", "tenant", "id")

_STATE = {v.number: v.name for v in types_pb2.ClaimState.DESCRIPTOR.values}
_REASON = {v.number: v.name for v in types_pb2.Reason.DESCRIPTOR.values}
_GRADE = {int(g): g.name for g in Grade}
_PLACEMENT = {v.number: v.name.removeprefix("PLACEMENT_") for v in types_pb2.Placement.DESCRIPTOR.values}
PENDING, ADMITTED, RELEASED, PREEMPTED, RECLAIMED, REFUSED = (types_pb2.ClaimState.Value(n) for n in (
    "PENDING", "ADMITTED", "RELEASED", "PREEMPTED", "RECLAIMED", "REFUSED"))
OPEN = (PENDING, ADMITTED)


def register(verbs: argparse._SubParsersAction) -> None:
    p = online_verb(verbs, "submit", "submit a claim, or every claim in a JSON Lines file (or, with --dry-run, "
                    "see what they would get)", _submit)
    p.add_argument("claim_id", nargs="?")
    p.add_argument("--file", metavar="CLAIMS.jsonl",
                   help="one SubmitRequest per line, as JSON (claims.proto's field names; - for stdin), "
                        f"sent with SubmitMany {SUBMIT_MANY_MAX} at a time; instead of CLAIM_ID and the flags")
    p.add_argument("--tenant")
    p.add_argument("--estimate-uj", type=uint64, help="your own estimate in µJ (graded Estimator)")
    p.add_argument("--work-class", default="", help="a declared work class (derived, ModelBased)")
    p.add_argument("--gang", default="", metavar="GANG_ID")
    p.add_argument("--gang-size", type=uint32, default=0)
    p.add_argument("--cpu-millis", type=uint64, default=0)
    p.add_argument("--memory-mb", type=uint64, default=0)
    p.add_argument("--disk-mb", type=uint64, default=0)
    p.add_argument("--gpu-mdev", type=uint64, default=0, help="milli-GPUs: 500 = half, 2000 = two")
    p.add_argument("--gpu-type", action="append", default=[], dest="gpu_types")
    p.add_argument("--exclusive", action="store_true")
    p.add_argument("--priority", type=int32, default=0)
    p.add_argument("--dry-run", action="store_true",
                   help="ask Claims.Plan: the decision it would get now (where, victims, or queue position "
                        "and every check), recording nothing; with --file, all its claims planned together "
                        "(a whole gang, say)")

    p = online_verb(verbs, "progress", "report a claim's cumulative completed units", _progress)
    p.add_argument("claim_id")
    p.add_argument("units", type=uint64)
    p.add_argument("--tenant", default="", help="the claim's tenant, when tenants you reach share its id "
                                                "(or write the claim TENANT/ID; docs/USER-GUIDE.md \"Names\")")

    p = online_verb(verbs, "release", "release a claim; its actual is what the agents measured", _release)
    p.add_argument("claim_id")
    p.add_argument("--tenant", default="", help="the claim's tenant, when tenants you reach share its id "
                                                "(or write the claim TENANT/ID; docs/USER-GUIDE.md \"Names\")")

    p = online_verb(verbs, "claims", "list claims like squeue (or one claim in full)", _list)
    p.add_argument("claim_id", nargs="?", help="show this claim in full")
    p.add_argument("--tenant", default="", help="a tenant's subtree; with CLAIM_ID: that claim's tenant, when "
                                                "tenants you reach share its id (or write it TENANT/ID)")
    p.add_argument("--state", action="append", default=[], type=_state, metavar="STATE",
                   help=f"any case, repeatable or comma-separated: {', '.join(_STATES)}")
    p.add_argument("--worker", default="", help="claims placed on this host: those admitted there now, unless "
                   "--all or --state")
    p.add_argument("--all", action="store_true", help="with --worker: its ended claims too")
    p.add_argument("--gang", default="", metavar="GANG_ID")
    p.add_argument("--slurm-job", default="", metavar="JOB",
                   help="the claims pool-slurm made for Slurm job JOB (123, or 123_4 for an array task): "
                        "ids slurm.<cluster>.JOB.<attempt>[.n<member>] (docs/SLURM.md)")
    p.add_argument("--since", type=moment, metavar="TIME",
                   help="only claims open at or after TIME (ended ones that ended then or later): now, a span "
                        "ago (90s, 15m, 2h, 3d) or an ISO 8601 UTC time (2026-12-01T10:30)")
    p.add_argument("--until", type=moment, metavar="TIME", help="only claims submitted at or before TIME")
    p.add_argument("--sort", choices=_SORTS, default="queue",
                   help="queue (default: pending in queue order, then admitted, then ended, newest first), "
                        "age (oldest first), priority, tenant or id")
    p.add_argument("--columns", type=column_names, metavar="NAME,...",
                   help=f"these columns, in this order: {', '.join(COLUMNS)} (-o wide: all of them)")
    p.add_argument("--no-headers", action="store_true", help="no header line (for scripts)")
    p.add_argument("-w", "--watch", action="store_true",
                   help="after the table, print a row each time a listed (or newly matching) claim changes, "
                        "as kubectl get -w does, until interrupted")

    p = online_verb(verbs, "watch", "stream a claim's (or a tenant's) state changes", _watch)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--claim", help="one claim (TENANT/ID when tenants you reach share its id)")
    target.add_argument("--tenant")
    p.add_argument("--count", type=uint64, default=0, help="stop after this many events (0: never)")
    p.add_argument("--history", action="store_true",
                   help="with --tenant: first the current status of every claim in the subtree, ended ones "
                        "included (else only what changes from now on; --claim always starts with its status)")


def _state(text: str) -> list[str]:
    names = [t.strip().upper() for t in text.split(",") if t.strip()]
    for name in names:
        if name not in _STATES:
            raise argparse.ArgumentTypeError(f"unknown state {name!r} (one of {', '.join(_STATES)})")
    return names


def _stub(args: Any) -> claims_pb2_grpc.ClaimsStub:
    return claims_pb2_grpc.ClaimsStub(channel(args))


def _request(args: Any) -> claims_pb2.SubmitRequest:
    request = claims_pb2.SubmitRequest(
        claim_id=args.claim_id, tenant=args.tenant, gang_id=args.gang, gang_size=args.gang_size,
        work_class=args.work_class, priority=args.priority,
        placement=types_pb2.PLACEMENT_EXCLUSIVE if args.exclusive else types_pb2.PLACEMENT_SHARED,
        resources=types_pb2.Resources(cpu_millis=args.cpu_millis, memory_mb=args.memory_mb, disk_mb=args.disk_mb,
                                      gpu_mdev=args.gpu_mdev, gpu_types=args.gpu_types))
    if args.estimate_uj is not None:
        request.estimate_uj = args.estimate_uj
    return request


def _submit(args: Any) -> int:
    if args.file is not None:
        if args.claim_id is not None:
            raise CtlError("INVALID_ARGUMENT", "give a CLAIM_ID or --file, not both")
        if not args.dry_run:
            return submit_file(args, args.file)
        requests = _claims_in(args.file)
    elif args.claim_id is None or (args.tenant is None and default_tenant(args) is None):
        raise CtlError("INVALID_ARGUMENT", "submit needs a CLAIM_ID and --tenant (or a context's tenant, or --file)")
    else:
        requests = [_request(args)]
    if args.dry_run:
        emit(args, to_doc(call(_stub(args).Plan, claims_pb2.PlanRequest(claims=requests))), render_plan)
        return 0
    return _show(args, call(_stub(args).Submit, requests[0]))


def submit_file(args: Any, path: str) -> int:
    """Every claim in a JSON Lines file, SUBMIT_MANY_MAX per SubmitMany call,
    all read and checked before the first is sent. Exit 1 if any was refused
    (each refusal also on stderr, with its line)."""
    requests = _claims_in(path)
    stub, results = _stub(args), []
    for at in range(0, len(requests), SUBMIT_MANY_MAX):
        batch = requests[at:at + SUBMIT_MANY_MAX]
        results.extend(call(stub.SubmitMany, claims_pb2.SubmitManyRequest(claims=batch)).results)
    refused = [(n, r.refused.message) for n, r in enumerate(results, 1) if r.WhichOneof("result") == "refused"]
    emit(args, {"results": [to_doc(r) for r in results]},
         lambda doc: render_claims([r.status for r in results if r.WhichOneof("result") == "status"],
                                   ClaimsTable.of(args)))
    for line, message in refused:
        print(f"poolctl: line {line}: {message}", file=sys.stderr)
    return EXIT_FAILED if refused else 0


def _claims_in(path: str) -> list[claims_pb2.SubmitRequest]:
    """The SubmitRequests of --file `path` (- for stdin)."""
    return _read_claims(sys.stdin if path == "-" else _open(path))


def _open(path: str) -> TextIO:
    try:
        return open(path, encoding="utf-8")
    except OSError as error:
        raise CtlError("INVALID_ARGUMENT", f"--file {path}: {error.strerror}") from None


def _read_claims(lines: TextIO) -> list[claims_pb2.SubmitRequest]:
    import json   # here, not at the top: only a file of claims needs these

    from google.protobuf import json_format
    requests = []
    with lines:
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                requests.append(json_format.ParseDict(json.loads(line), claims_pb2.SubmitRequest()))
            except (ValueError, json_format.ParseError) as error:
                raise CtlError("INVALID_ARGUMENT", f"line {n}: {error}") from None
    return requests


def _progress(args: Any) -> int:
    request = claims_pb2.ProgressRequest(claim_id=args.claim_id, tenant=args.tenant, completed_units=args.units)
    return _show(args, call(_stub(args).Progress, request))


def _release(args: Any) -> int:
    return _show(args, call(_stub(args).Release, claims_pb2.ReleaseRequest(claim_id=args.claim_id,
                                                                            tenant=args.tenant)))


def _list(args: Any) -> int:
    if args.claim_id:
        status = call(_stub(args).Get, claims_pb2.GetClaimRequest(claim_id=args.claim_id, tenant=args.tenant))
        emit(args, to_doc(status), lambda doc: render_claim(doc, status))
        return 0
    states = [s for group in args.state for s in group]
    if args.worker and not states and not args.all:
        states = ["ADMITTED"]   # the claims on a host now
    request = claims_pb2.ListClaimsRequest(tenant=args.tenant, states=[types_pb2.ClaimState.Value(s) for s in states])
    shows = _filter(args)
    table_ = None if output(args) == "json" else ClaimsTable.of(args)
    stub = _stub(args)
    changes = _watch_stream(stub, args.tenant) if args.watch else None   # opened first: nothing falls between
    claims = sort_claims([c for page in pages(stub.List, request) for c in page.claims if shows(c)], args.sort)
    if table_ is None:
        emit(args, {"claims": [to_doc(c) for c in claims]}, lambda doc: "")
    else:
        lines, widths = table_.render(claims)
        if lines:
            print("\n".join(lines), flush=True)
    if changes is None:
        return 0
    wanted = {types_pb2.ClaimState.Value(s) for s in states}
    try:
        for event in changes:
            c = event.status
            if (wanted and c.state not in wanted) or not shows(c):
                continue
            if table_ is None:
                emit_line(args, to_doc(c), lambda doc: "")
            else:
                widths = widths if lines else table_.render([c])[1]
                print(row_line(table_.rows([c], now_ns())[0], widths), flush=True)
    except grpc.RpcError as error:
        raise as_ctl_error(error) from None
    return 0


def _filter(args: Any) -> Callable[[claims_pb2.ClaimStatus], bool]:
    """What the server does not filter: worker, gang, --since/--until, --slurm-job."""
    worker, gang, since, until = args.worker, args.gang, args.since, args.until
    job = re.compile(rf"slurm\.[^.]+\.{re.escape(args.slurm_job)}\.[0-9]+(\.n[0-9]+)?") if args.slurm_job else None

    def shows(c: claims_pb2.ClaimStatus) -> bool:
        return ((not worker or c.worker == worker) and (not gang or c.gang_id == gang)
                and (since is None or not c.ended_ns or c.ended_ns >= since)
                and (until is None or c.submitted_ns <= until) and (job is None or job.fullmatch(c.claim_id)))
    return shows


def _watch_stream(stub: claims_pb2_grpc.ClaimsStub, tenant: str) -> Iterator[claims_pb2.ClaimEvent]:
    """The claims' changes from now on (a tenant's subtree, or every claim),
    read by a thread from the moment this is called: the call is open before
    the list is asked for, and its first answer may be long in coming."""
    import queue   # here, not at the top: only -w needs them
    import threading
    events: queue.Queue = queue.Queue()

    def read() -> None:
        try:
            for event in stub.Watch(claims_pb2.WatchRequest(tenant=tenant, from_now=True)):
                events.put(event)
        except grpc.RpcError as error:
            events.put(error)
        events.put(None)

    threading.Thread(target=read, daemon=True).start()

    def changes() -> Iterator[claims_pb2.ClaimEvent]:
        while (event := events.get()) is not None:
            if isinstance(event, grpc.RpcError):
                raise event
            yield event
    return changes()


_STATE_ORDER = {PENDING: 0, ADMITTED: 1}


def sort_claims(claims: list[claims_pb2.ClaimStatus], how: str) -> list[claims_pb2.ClaimStatus]:
    """squeue's habit by default: pending claims in the order they will be
    judged, then running ones by admission, then ended ones, newest first."""
    if how == "age":
        return sorted(claims, key=lambda c: (c.submitted_ns, c.claim_id))
    if how == "priority":
        return sorted(claims, key=lambda c: (-c.priority, c.submitted_ns, c.claim_id))
    if how == "tenant":
        return sorted(claims, key=lambda c: (c.tenant, c.claim_id))
    if how == "id":
        return sorted(claims, key=lambda c: c.claim_id)
    return sorted(claims, key=lambda c: (
        _STATE_ORDER.get(c.state, 2), c.queue_position if c.state == PENDING else 0,
        c.admitted_ns if c.state == ADMITTED else -c.ended_ns, c.claim_id))


def print_claims(table_: ClaimsTable, claims: list[claims_pb2.ClaimStatus], how: str) -> None:
    """The table `poolctl claims` prints, sorted `how` (bench/cli.py times this)."""
    print("\n".join(table_.render(sort_claims(claims, how))[0]), flush=True)


def _watch(args: Any) -> int:
    request = claims_pb2.WatchRequest(claim_id=args.claim) if args.claim else \
        claims_pb2.WatchRequest(tenant=args.tenant, from_now=not args.history)
    seen = 0
    if output(args) != "json":
        print(_WATCH_HEADER, flush=True)
    try:
        for event in _stub(args).Watch(request):
            emit_line(args, to_doc(event), render_event)
            seen += 1
            if args.count and seen >= args.count:
                break
    except grpc.RpcError as error:
        raise as_ctl_error(error) from None
    return 0


def _show(args: Any, status: claims_pb2.ClaimStatus) -> int:
    emit(args, to_doc(status), lambda doc: render_claims([status], ClaimsTable.of(args)))
    return 0


# -- the claims table -------------------------------------------------------------
# Rendered from the ClaimStatus messages themselves (a JSON document per claim
# is built only for -o json or a custom column given as a JSON path): at 10,000
# claims that is most of what the table costs (bench/cli.py).



def _ended_why(c: claims_pb2.ClaimStatus) -> str:
    """Why an ended claim ended, where its reason would say only that it was once admissible."""
    if c.state == REFUSED:
        return _REASON[c.reason]
    if c.state == RELEASED:
        what = "released" if c.admitted_ns or c.worker else "withdrawn"   # withdrawn: before admission
        return f"{what} by {c.released_by}" if c.released_by else what
    if c.state == PREEMPTED:
        return "preempted for another claim"
    return "reclaimed: found idle"


def _reason(c: claims_pb2.ClaimStatus, now: int) -> str:
    return _REASON[c.reason] if c.state in OPEN else _ended_why(c)


def _gpus(mdev: int) -> str:
    """Milli-GPUs as GPUs: 1, 0.5, 2.25."""
    return f"{mdev / 1000:g}"


def _cpu(millis: int) -> str:
    """kubectl's spelling: 2 cores, or 500m."""
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _span(start: int, end: int) -> str:
    return duration(end - start) if start and end else "—"


def _wait(c: claims_pb2.ClaimStatus, now: int) -> str:
    """In the queue: until admission, while pending until now, else until it ended."""
    end = c.admitted_ns or (now if c.state == PENDING else c.ended_ns)
    return _span(c.submitted_ns, end)


def _elapsed(c: claims_pb2.ClaimStatus, now: int) -> str:
    """Run time, as sacct's Elapsed: from admission to the end (or to now while admitted)."""
    return _span(c.admitted_ns, c.ended_ns or now) if c.admitted_ns else "—"


def _estimate(c: claims_pb2.ClaimStatus) -> str:
    if c.request.HasField("estimate_uj"):
        return format_uj(c.request.estimate_uj)
    return f"class {c.request.work_class}" if c.request.work_class else "—"


def _time(ns: int) -> str:
    return utc_s(ns) if ns else "—"


# name -> (header, what it shows, the cell of a claim at a time `now`); in the order -o wide prints them
COLUMNS: dict[str, tuple[str, str, Callable[[claims_pb2.ClaimStatus, int], Any]]] = {
    "claim": ("claim", "the claim id", lambda c, now: c.claim_id),
    "tenant": ("tenant", "its tenant", lambda c, now: c.tenant),
    "state": ("state", "PENDING, ADMITTED, or how it ended", lambda c, now: _STATE[c.state]),
    "reason": ("reason", "why it waits (a pending claim), ADMISSIBLE (admitted), or why it ended", _reason),
    "gpus": ("gpus", "GPUs requested (milli-GPUs / 1000)", lambda c, now: _gpus(c.request.resources.gpu_mdev)),
    "cpu": ("cpu", "CPU requested: cores, or millicores as 500m",
            lambda c, now: _cpu(c.request.resources.cpu_millis)),
    "mem": ("mem", "memory requested (MB)", lambda c, now: c.request.resources.memory_mb),
    "disk": ("disk", "disk requested (MB)", lambda c, now: c.request.resources.disk_mb),
    "gpu-types": ("gpu types", "the GPU types it accepts",
                  lambda c, now: ",".join(c.request.resources.gpu_types) or "any"),
    "placement": ("placement", "SHARED or EXCLUSIVE", lambda c, now: _PLACEMENT.get(c.request.placement)),
    "estimate": ("estimate", "the submitted estimate (or its declared work class)", lambda c, now: _estimate(c)),
    "hold": ("hold", "the energy held (— while pending: nothing is)",
             lambda c, now: format_uj(c.hold_uj) if c.state != PENDING else "—"),
    "hold-grade": ("hold grade", "the grade of the estimate behind the hold",
                   lambda c, now: _GRADE.get(c.hold_grade) if c.state != PENDING else "—"),
    "measured": ("measured", "energy measured so far (the actual once ended)",
                 lambda c, now: format_uj(c.measured_uj) if c.state != PENDING else "—"),
    "measured-grade": ("measured grade", "the worst grade of what was measured",
                       lambda c, now: _GRADE.get(c.measured_grade)),
    "overrun": ("overrun", "measured above its hold", lambda c, now: yes_no(c.overrun)),
    "borrowed": ("borrowed", "the part of the hold borrowed beyond the tenant's guarantee",
                 lambda c, now: format_uj(c.borrowed_uj) if c.borrowed else None),
    "units": ("units", "completed units reported", lambda c, now: c.completed_units),
    "priority": ("priority", "its priority", lambda c, now: c.priority),
    "gang": ("gang", "its gang", lambda c, now: c.gang_id),
    "position": ("position", "its place in the pending queue", lambda c, now: c.queue_position or None),
    "submitted": ("submitted", "when it was submitted (UTC)", lambda c, now: _time(c.submitted_ns)),
    "start": ("start", "when it was admitted (UTC)", lambda c, now: _time(c.admitted_ns)),
    "end": ("end", "when it ended (UTC)", lambda c, now: _time(c.ended_ns)),
    "age": ("age", "since submission", lambda c, now: _span(c.submitted_ns, now)),
    "wait": ("wait", "time in the queue", _wait),
    "elapsed": ("elapsed", "run time: admission to end, or to now", _elapsed),
    "worker": ("worker", "where it is placed", lambda c, now: c.worker),
    "bound": ("bound", "bound to the devices its job was given outside Pool (RULES §10)",
              lambda c, now: yes_no(c.bound)),
    "submitted-by": ("submitted by", "the principal that submitted it", lambda c, now: c.submitted_by),
    "released-by": ("released by", "the principal that released it", lambda c, now: c.released_by),
}
DEFAULT_COLUMNS = ("claim", "tenant", "state", "reason", "gpus", "cpu", "estimate", "hold", "age", "elapsed",
                   "worker")
WIDE_COLUMNS = tuple(COLUMNS)


class ClaimsTable:
    """Which columns a claims table shows, under which headers."""

    def __init__(self, columns: list[tuple[str, Callable[[claims_pb2.ClaimStatus, int], Any]]],
                 headed: bool = True) -> None:
        self.headers = [header for header, _ in columns]
        self.cells = [cell for _, cell in columns]
        self.headed = headed

    @classmethod
    def named(cls, names: tuple[str, ...] | list[str], headed: bool = True) -> ClaimsTable:
        return cls([(COLUMNS[n][0], COLUMNS[n][2]) for n in names], headed)

    @classmethod
    def default(cls) -> ClaimsTable:
        return cls.named(DEFAULT_COLUMNS)

    @classmethod
    def of(cls, args: Any) -> ClaimsTable:
        """The table -o and --columns/--no-headers ask for."""
        how = layout(args)
        headed = not getattr(args, "no_headers", False)
        if getattr(args, "columns", None):
            if how not in ("table", "wide"):
                raise CtlError("INVALID_ARGUMENT", "--columns goes with the table, not -o " + how.split("=")[0])
            return cls.named(args.columns, headed)
        if how == "wide":
            return cls.named(WIDE_COLUMNS, headed)
        if how.startswith(CUSTOM):
            return cls(custom_columns(how[len(CUSTOM):]), headed)
        return cls.named(DEFAULT_COLUMNS, headed)

    def rows(self, claims: list[claims_pb2.ClaimStatus], now: int) -> list[list[str]]:
        cells = self.cells
        return [[_text(cell(c, now)) for cell in cells] for c in claims]

    def render(self, claims: list[claims_pb2.ClaimStatus], now: int | None = None) -> tuple[list[str], list[int]]:
        return fitted(self.headers, self.rows(claims, now_ns() if now is None else now), self.headed)


def _text(value: Any) -> str:
    return "—" if value is None or value == "" else str(value)


def column_names(text: str) -> list[str]:
    """--columns: names of the table's columns, comma-separated."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in COLUMNS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown column {', '.join(unknown) or text!r} (columns: "
                                         f"{', '.join(COLUMNS)})")
    return names


def custom_columns(spec: str) -> list[tuple[str, Callable[[claims_pb2.ClaimStatus, int], Any]]]:
    """kubectl's custom-columns: HEADER:COLUMN,... where COLUMN is a column's
    name or a JSON path into the claim's JSON document (.request.resources.gpu_mdev)."""
    columns = []
    for part in spec.split(","):
        header, sep, field = part.partition(":")
        if not sep or not header or not field:
            raise CtlError("USAGE", f"custom-columns: {part!r} is not HEADER:COLUMN (a column name, or a JSON path "
                                    "such as .request.resources.gpu_mdev)", EXIT_USAGE)
        if field.startswith("."):
            columns.append((header, _path_cell(field)))
        elif field in COLUMNS:
            columns.append((header, COLUMNS[field][2]))
        else:
            raise CtlError("USAGE", f"custom-columns: unknown column {field!r} (columns: {', '.join(COLUMNS)}; "
                                    "or a JSON path starting with a dot)", EXIT_USAGE)
    return columns


def _path_cell(path: str) -> Callable[[claims_pb2.ClaimStatus, int], Any]:
    import json   # here, not at the top: only a custom column given as a JSON path needs it
    keys = [k for k in path.split(".") if k]

    def cell(c: claims_pb2.ClaimStatus, now: int) -> Any:
        value: Any = to_doc(c)
        for key in keys:
            if isinstance(value, dict):
                value = value.get(key)
            elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
                value = value[int(key)]
            else:
                return None
        return json.dumps(value, separators=(",", ":")) if isinstance(value, (dict, list)) else value
    return cell


def _status(claim: Any) -> claims_pb2.ClaimStatus:
    """A ClaimStatus from itself or from its JSON document (to_doc's)."""
    if isinstance(claim, claims_pb2.ClaimStatus):
        return claim
    from google.protobuf import json_format   # here, not at the top: only a document needs it
    return json_format.ParseDict(_no_nulls(claim), claims_pb2.ClaimStatus(), ignore_unknown_fields=True)


def _no_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _no_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_nulls(v) for v in value]
    return value


def render_claims(claims: list, table_: ClaimsTable | None = None) -> str:
    """Claims (ClaimStatus messages or their JSON documents) as a table, the default columns unless told."""
    return "\n".join((table_ or ClaimsTable.default()).render([_status(c) for c in claims])[0])


def render_claim(c: dict, status: claims_pb2.ClaimStatus | None = None) -> str:
    """One claim in full, as `kubectl describe` does: a field per line (`status`: the message
    `c` was made from, if at hand: parsing the document back costs json_format's import)."""
    status, now = status or _status(c), now_ns()
    age, wait = _span(status.submitted_ns, now), _wait(status, now)
    request = c["request"] or {}
    resources = request.get("resources") or {}
    rows = [("claim", c["claim_id"]), ("tenant", c["tenant"]), ("state", c["state"]),
            ("reason", _reason(status, now)),
            ("priority", c["priority"]), ("gang", c["gang_id"]),
            ("queue position", c["queue_position"] or None),
            ("submitted", utc(c["submitted_ns"]) if c["submitted_ns"] else None),
            ("admitted", utc(c["admitted_ns"]) if c["admitted_ns"] else None),
            ("ended", utc(c["ended_ns"]) if c["ended_ns"] else None), ("age", age), ("wait", wait),
            ("elapsed", _elapsed(status, now)),
            ("hold", f"{format_uj(c['hold_uj'])} ({grade_label(c['hold_grade']) or 'no grade'})"
             if status.state != PENDING else "— (nothing is held while pending)"),
            ("measured", f"{format_uj(c['measured_uj'])} ({grade_label(c['measured_grade']) or 'nothing yet'})"),
            ("overrun", yes_no(c["overrun"])),
            ("borrowed", format_uj(c["borrowed_uj"]) if c["borrowed"] else "no"),
            ("completed units", c["completed_units"]), ("worker", c["worker"]),
            ("devices", ", ".join(f"{d} {m} mdev" for d, m in c["devices_mdev"].items())),
            ("requested", ", ".join(f"{k} {v}" for k, v in resources.items() if v and k != "gpu_types")),
            ("gpu types", ", ".join(resources.get("gpu_types") or [])),
            ("placement", request.get("placement") or "PLACEMENT_SHARED"),
            ("estimate", format_uj(request.get("estimate_uj"))), ("work class", request.get("work_class")),
            ("submitted by", c.get("submitted_by")), ("released by", c.get("released_by")),
            ("ledger seq", c["ledger_seq"])]
    return table(("field", "value"), rows)


_WATCH_HEADER_COLUMNS = ("time", "event", "claim", "tenant", "state", "reason", "hold", "measured", "worker")


def _event_cells(e: dict) -> list[str]:
    s = e["status"]
    return [utc(e["time_ns"]), (e["kind"] or "—").removeprefix("EVENT_"), s["claim_id"], s["tenant"], s["state"],
            s["reason"] or "—", format_uj(s["hold_uj"]), format_uj(s["measured_uj"]), s["worker"] or "—"]


# watch streams, so its columns have fixed widths rather than fitted ones
_WATCH_WIDTHS = (24, 9, 16, 12, 9, 24, 12, 12, 0)
_WATCH_HEADER = "  ".join(h.ljust(w) for h, w in zip(_WATCH_HEADER_COLUMNS, _WATCH_WIDTHS)).rstrip()


def render_event(e: dict) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(_event_cells(e), _WATCH_WIDTHS)).rstrip()


def render_plan(doc: dict) -> str:
    """What a dry run would get: the claims' outcomes, victims, and for a
    pending claim its checks (as explain shows them)."""
    parts = ["dry run: nothing was recorded", render_claims(doc["claims"])]
    if doc["victims"]:
        parts.append(table(("victim", "tenant", "for", "tier", "measured", "units", "priority", "why"),
                           [(v["claim_id"], v["tenant"], v["for_claim"], v["tier"], format_uj(v["measured_uj"]),
                             v["completed_units"], v["priority"], v["why"]) for v in doc["victims"]]))
    from scheduler.ctl.ops import render_explain   # here, not at the top: claims and submit need no ops verbs
    parts += [render_explain(e) for e in doc["explanations"]]
    return "\n\n".join(parts)
