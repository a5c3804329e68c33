"""poolctl verbs for tenants' claims: submit, progress, release, claims, watch."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

import grpc
from google.protobuf import json_format

from protos.energy import format_uj
from protos.limits import SUBMIT_MANY_MAX
from protos.pool.v1 import claims_pb2, claims_pb2_grpc, types_pb2
from scheduler.ctl.output import EXIT_FAILED, CtlError, emit, table
from scheduler.ctl.wire import as_ctl_error, call, channel, online_verb, to_doc


def register(verbs: argparse._SubParsersAction) -> None:
    p = online_verb(verbs, "submit", "submit a claim, or every claim in a JSON Lines file", _submit)
    p.add_argument("claim_id", nargs="?")
    p.add_argument("--file", metavar="CLAIMS.jsonl",
                   help="one SubmitRequest per line, as JSON (claims.proto's field names; - for stdin), "
                        f"sent with SubmitMany {SUBMIT_MANY_MAX} at a time; instead of CLAIM_ID and the flags")
    p.add_argument("--tenant")
    p.add_argument("--estimate-uj", type=int, help="your own estimate (graded Estimator)")
    p.add_argument("--work-class", default="", help="a declared work class (derived, ModelBased)")
    p.add_argument("--gang", default="", metavar="GANG_ID")
    p.add_argument("--gang-size", type=int, default=0)
    p.add_argument("--cpu-millis", type=int, default=0)
    p.add_argument("--memory-mb", type=int, default=0)
    p.add_argument("--disk-mb", type=int, default=0)
    p.add_argument("--gpu-mdev", type=int, default=0, help="milli-GPUs: 500 = half, 2000 = two")
    p.add_argument("--gpu-type", action="append", default=[], dest="gpu_types")
    p.add_argument("--exclusive", action="store_true")
    p.add_argument("--priority", type=int, default=0)

    p = online_verb(verbs, "progress", "report a claim's cumulative completed units", _progress)
    p.add_argument("claim_id")
    p.add_argument("units", type=int)

    p = online_verb(verbs, "release", "release a claim; its actual is what the agents measured", _release)
    p.add_argument("claim_id")

    p = online_verb(verbs, "claims", "list claims", _list)
    p.add_argument("--tenant", default="")
    p.add_argument("--state", action="append", default=[], choices=_STATES)

    p = online_verb(verbs, "watch", "stream a claim's (or a tenant's) state changes", _watch)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--claim")
    target.add_argument("--tenant")
    p.add_argument("--count", type=int, default=0, help="stop after this many events (0: never)")


_STATES = [v.name for v in types_pb2.ClaimState.DESCRIPTOR.values if v.number]


def _stub(args: Any) -> claims_pb2_grpc.ClaimsStub:
    return claims_pb2_grpc.ClaimsStub(channel(args))


def _natural(value: int, flag: str) -> int:
    if value < 0:
        raise CtlError("INVALID_ARGUMENT", f"{flag} must not be negative, got {value}")
    return value


def _submit(args: Any) -> int:
    if args.file is not None:
        if args.claim_id is not None:
            raise CtlError("INVALID_ARGUMENT", "give a CLAIM_ID or --file, not both")
        return submit_file(args, args.file)
    if args.claim_id is None or args.tenant is None:
        raise CtlError("INVALID_ARGUMENT", "submit needs a CLAIM_ID and --tenant (or --file)")
    request = claims_pb2.SubmitRequest(
        claim_id=args.claim_id, tenant=args.tenant, gang_id=args.gang,
        gang_size=_natural(args.gang_size, "--gang-size"), work_class=args.work_class,
        priority=args.priority,
        placement=types_pb2.PLACEMENT_EXCLUSIVE if args.exclusive else types_pb2.PLACEMENT_SHARED,
        resources=types_pb2.Resources(
            cpu_millis=_natural(args.cpu_millis, "--cpu-millis"),
            memory_mb=_natural(args.memory_mb, "--memory-mb"),
            disk_mb=_natural(args.disk_mb, "--disk-mb"),
            gpu_mdev=_natural(args.gpu_mdev, "--gpu-mdev"),
            gpu_types=args.gpu_types))
    if args.estimate_uj is not None:
        request.estimate_uj = _natural(args.estimate_uj, "--estimate-uj")
    return _show(args, call(_stub(args).Submit, request))


def submit_file(args: Any, path: str) -> int:
    """Every claim in a JSON Lines file, SUBMIT_MANY_MAX per SubmitMany call,
    all read and checked before the first is sent. Exit 1 if any was refused
    (each refusal also on stderr, with its line)."""
    requests = _read_claims(sys.stdin if path == "-" else _open(path))
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


def _open(path: str) -> TextIO:
    try:
        return open(path, encoding="utf-8")
    except OSError as error:
        raise CtlError("INVALID_ARGUMENT", f"--file {path}: {error.strerror}") from None


def _read_claims(lines: TextIO) -> list[claims_pb2.SubmitRequest]:
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
    request = claims_pb2.ProgressRequest(claim_id=args.claim_id, completed_units=_natural(args.units, "units"))
    return _show(args, call(_stub(args).Progress, request))


def _release(args: Any) -> int:
    return _show(args, call(_stub(args).Release, claims_pb2.ReleaseRequest(claim_id=args.claim_id)))


def _list(args: Any) -> int:
    request = claims_pb2.ListClaimsRequest(
        tenant=args.tenant, states=[types_pb2.ClaimState.Value(s) for s in args.state])
    claims = [to_doc(c) for c in call(_stub(args).List, request).claims]
    emit(args, {"claims": claims}, lambda doc: render_claims(doc["claims"]))
    return 0


def _watch(args: Any) -> int:
    request = claims_pb2.WatchRequest(claim_id=args.claim) if args.claim else claims_pb2.WatchRequest(tenant=args.tenant)
    seen = 0
    try:
        for event in _stub(args).Watch(request):
            doc = to_doc(event)
            emit(args, doc, lambda d: render_claims([d["status"]]).splitlines()[-1])
            seen += 1
            if args.count and seen >= args.count:
                break
    except grpc.RpcError as error:
        raise as_ctl_error(error) from None
    return 0


def _show(args: Any, status: claims_pb2.ClaimStatus) -> int:
    emit(args, to_doc(status), lambda doc: render_claims([doc]))
    return 0


def render_claims(claims: list[dict]) -> str:
    rows = [(c["claim_id"], c["tenant"], c["state"], c["reason"], format_uj(c["hold_uj"]), c["hold_grade"],
             format_uj(c["measured_uj"]), c["measured_grade"], c["completed_units"], c["worker"] or "—",
             c["submitted_by"] or "—", c["released_by"] or "—", "overrun" if c["overrun"] else "")
            for c in claims]
    return table(("claim", "tenant", "state", "reason", "hold", "grade", "measured", "grade", "units",
                  "worker", "submitted by", "released by", ""), rows)
