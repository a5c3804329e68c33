"""poolctl verbs for tenants' claims: submit (and --dry-run), progress,
release, claims (squeue-like: age, wait, queue position; one claim in
full), watch."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, TextIO

import grpc

from protos.energy import format_uj
from protos.limits import SUBMIT_MANY_MAX
from protos.pool.v1 import claims_pb2, claims_pb2_grpc, types_pb2
from scheduler.ctl.ops import render_explain
from scheduler.ctl.output import (EXIT_FAILED, CtlError, duration, emit, emit_line, int32, now_ns, output, table,
                                  uint32, uint64, utc, yes_no)
from scheduler.ctl.wire import as_ctl_error, call, channel, default_tenant, grade_label, online_verb, pages, to_doc

_STATES = [v.name for v in types_pb2.ClaimState.DESCRIPTOR.values if v.number]
_SORTS = ("queue", "age", "priority", "tenant", "id")


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

    p = online_verb(verbs, "release", "release a claim; its actual is what the agents measured", _release)
    p.add_argument("claim_id")

    p = online_verb(verbs, "claims", "list claims like squeue (or one claim in full)", _list)
    p.add_argument("claim_id", nargs="?", help="show this claim in full")
    p.add_argument("--tenant", default="", help="a tenant's subtree")
    p.add_argument("--state", action="append", default=[], type=_state, metavar="STATE",
                   help=f"any case, repeatable or comma-separated: {', '.join(_STATES)}")
    p.add_argument("--worker", default="", help="claims placed on this host")
    p.add_argument("--gang", default="", metavar="GANG_ID")
    p.add_argument("--slurm-job", default="", metavar="JOB",
                   help="the claims pool-slurm made for Slurm job JOB (123, or 123_4 for an array task): "
                        "ids slurm.<cluster>.JOB.<attempt>[.n<member>] (docs/SLURM.md)")
    p.add_argument("--sort", choices=_SORTS, default="queue",
                   help="queue (default: pending in queue order, then admitted, then ended, newest first), "
                        "age (oldest first), priority, tenant or id")

    p = online_verb(verbs, "watch", "stream a claim's (or a tenant's) state changes", _watch)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--claim")
    target.add_argument("--tenant")
    p.add_argument("--count", type=uint64, default=0, help="stop after this many events (0: never)")


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
         lambda doc: render_claims([d["status"] for d in doc["results"] if d["status"] is not None]))
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
    from google.protobuf import json_format   # here, not at the top: only a file of claims needs it
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
    request = claims_pb2.ProgressRequest(claim_id=args.claim_id, completed_units=args.units)
    return _show(args, call(_stub(args).Progress, request))


def _release(args: Any) -> int:
    return _show(args, call(_stub(args).Release, claims_pb2.ReleaseRequest(claim_id=args.claim_id)))


def _list(args: Any) -> int:
    if args.claim_id:
        doc = to_doc(call(_stub(args).Get, claims_pb2.GetClaimRequest(claim_id=args.claim_id)))
        emit(args, doc, render_claim)
        return 0
    states = [s for group in args.state for s in group]
    request = claims_pb2.ListClaimsRequest(tenant=args.tenant, states=[types_pb2.ClaimState.Value(s) for s in states])
    claims = [to_doc(c) for page in pages(_stub(args).List, request) for c in page.claims]
    job = re.compile(rf"slurm\.[^.]+\.{re.escape(args.slurm_job)}\.[0-9]+(\.n[0-9]+)?") if args.slurm_job else None
    claims = [c for c in claims if (not args.worker or c["worker"] == args.worker)
              and (not args.gang or c["gang_id"] == args.gang)
              and (job is None or job.fullmatch(c["claim_id"]))]
    emit(args, {"claims": sort_claims(claims, args.sort)}, lambda doc: render_claims(doc["claims"]))
    return 0


_STATE_ORDER = {"PENDING": 0, "ADMITTED": 1}


def sort_claims(claims: list[dict], how: str) -> list[dict]:
    """squeue's habit by default: pending claims in the order they will be
    judged, then running ones by admission, then ended ones, newest first."""
    if how == "age":
        return sorted(claims, key=lambda c: (c["submitted_ns"], c["claim_id"]))
    if how == "priority":
        return sorted(claims, key=lambda c: (-c["priority"], c["submitted_ns"], c["claim_id"]))
    if how == "tenant":
        return sorted(claims, key=lambda c: (c["tenant"], c["claim_id"]))
    if how == "id":
        return sorted(claims, key=lambda c: c["claim_id"])
    return sorted(claims, key=lambda c: (
        _STATE_ORDER.get(c["state"], 2), c["queue_position"] if c["state"] == "PENDING" else 0,
        c["admitted_ns"] if c["state"] == "ADMITTED" else -c["ended_ns"], c["claim_id"]))


def _watch(args: Any) -> int:
    request = claims_pb2.WatchRequest(claim_id=args.claim) if args.claim else claims_pb2.WatchRequest(tenant=args.tenant)
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
    emit(args, to_doc(status), lambda doc: render_claims([doc]))
    return 0


# -- tables ---------------------------------------------------------------------

CLAIM_COLUMNS = ("claim", "tenant", "state", "reason", "priority", "gang", "position", "age", "wait", "hold",
                 "hold grade", "measured", "measured grade", "borrowed", "units", "worker", "overrun",
                 "submitted by")


def _times(c: dict, now: int) -> tuple[str, str]:
    """Age since submission, and the wait in the queue (until admission, or
    until now while pending)."""
    submitted = c["submitted_ns"]
    if not submitted:
        return "—", "—"
    end = c["ended_ns"] or now
    admitted = c["admitted_ns"]
    waited = (admitted if admitted else (now if c["state"] == "PENDING" else end)) - submitted
    return duration(now - submitted), duration(waited)


def claim_row(c: dict, now: int) -> tuple:
    age, wait = _times(c, now)
    return (c["claim_id"], c["tenant"], c["state"], c["reason"], c["priority"], c["gang_id"],
            c["queue_position"] or None, age, wait, format_uj(c["hold_uj"]), grade_label(c["hold_grade"]),
            format_uj(c["measured_uj"]), grade_label(c["measured_grade"]),
            format_uj(c["borrowed_uj"]) if c["borrowed"] else None, c["completed_units"], c["worker"],
            yes_no(c["overrun"]), c.get("submitted_by"))


def render_claims(claims: list[dict]) -> str:
    now = now_ns()
    return table(CLAIM_COLUMNS, [claim_row(c, now) for c in claims])


def render_claim(c: dict) -> str:
    """One claim in full, as `kubectl describe` does: a field per line."""
    age, wait = _times(c, now_ns())
    request = c["request"] or {}
    resources = request.get("resources") or {}
    rows = [("claim", c["claim_id"]), ("tenant", c["tenant"]), ("state", c["state"]), ("reason", c["reason"]),
            ("priority", c["priority"]), ("gang", c["gang_id"]),
            ("queue position", c["queue_position"] or None),
            ("submitted", utc(c["submitted_ns"]) if c["submitted_ns"] else None),
            ("admitted", utc(c["admitted_ns"]) if c["admitted_ns"] else None),
            ("ended", utc(c["ended_ns"]) if c["ended_ns"] else None), ("age", age), ("wait", wait),
            ("hold", f"{format_uj(c['hold_uj'])} ({grade_label(c['hold_grade']) or 'no grade'})"),
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
    parts += [render_explain(e) for e in doc["explanations"]]
    return "\n\n".join(parts)
