"""poolctl verbs for operators: tenants, workers (and cordon, uncordon,
drain), explain, splits, preemption and reclamation order, reclaim, estimate."""

from __future__ import annotations

import argparse
import time
from typing import Any

from protos.energy import format_uj, format_uw
from protos.pool.v1 import ops_pb2, ops_pb2_grpc
from scheduler.ctl.output import CtlError, EXIT_FAILED, emit, output, table, uint64, yes_no
from scheduler.ctl.wire import call, channel, grade_label, online_verb, pages, to_doc

UNALLOCATED = "(unallocated)"   # the tenant of the devices' unallocated remainder, in every table and JSON


def register(verbs: argparse._SubParsersAction) -> None:
    online_verb(verbs, "tenants", "the entitlement tree: guarantees and usage", _tenants)
    p = online_verb(verbs, "workers", "workers: capacity, claims, GPUs free; or cordon, uncordon, drain HOST",
                    _workers)
    p.add_argument("action", nargs="?", choices=("cordon", "uncordon", "drain"),
                   help="cordon: nothing new is placed on HOST; uncordon: undo; drain: cordon, then "
                        "(with --wait) wait until HOST's claims are released (nothing is preempted)")
    p.add_argument("host", nargs="?")
    p.add_argument("--wait", action="store_true", help="drain: wait until HOST holds no claim")
    p.add_argument("--wait-timeout", type=_wait_s, default=0, metavar="SECONDS",
                   help="drain --wait: give up (exit 1) after this long; 0: wait for ever "
                        "(--timeout is the connect timeout, as on every verb)")
    p = online_verb(verbs, "explain", "why a claim is (not) admitted", _explain)
    p.add_argument("claim_id")
    p.add_argument("--tenant", default="", help="the claim's tenant, when tenants you reach share its id "
                                                "(or write the claim TENANT/ID; docs/USER-GUIDE.md \"Names\")")
    p = online_verb(verbs, "splits", "per-tenant joule splits by device and window", _splits)
    p.add_argument("--tenant", default="")
    p.add_argument("--since", type=uint64, default=0, metavar="UNIX_NS")
    p.add_argument("--device", default="")
    p.add_argument("--plot", metavar="FILE.png", help="also draw per-tenant energy over time, stacked (pool[plot])")
    p = online_verb(verbs, "preemption-order", "who would be preempted, worst first", _preemption)
    p.add_argument("--for", dest="for_claim", default="", metavar="CLAIM_ID")
    p = online_verb(verbs, "reclamation-order", "idle verdicts and the reclamation order", _reclamation)
    p.add_argument("--plot", metavar="FILE.png",
                   help="also draw each claim's mean power against its idle threshold, by verdict (pool[plot])")
    online_verb(verbs, "reclaim", "settle every Idle claim as RECLAIMED", _reclaim)
    p = online_verb(verbs, "estimate", "the derived estimate of a work class", _estimate)
    p.add_argument("work_class")


def _wait_s(text: str) -> float:
    """A number of seconds ≥ 0 (0: wait for ever); a negative one, NaN or inf is refused."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds ≥ 0")
    return value


def _ask(args: Any, method: str, request: Any) -> dict:
    stub = ops_pb2_grpc.OperationsStub(channel(args))
    return to_doc(call(getattr(stub, method), request))


def _ask_all(args: Any, method: str, request: Any, *lists: str) -> dict:
    """A paginated call's answer with every page's `lists` joined, as one answer."""
    stub = ops_pb2_grpc.OperationsStub(channel(args))
    answers = [to_doc(a) for a in pages(getattr(stub, method), request)]
    doc = answers[0]
    for answer in answers[1:]:
        for name in lists:
            doc.setdefault(name, []).extend(answer.get(name, []))
    doc.pop("next_page_token", None)
    return doc


def _tenants(args: Any) -> int:
    emit(args, _ask(args, "Tenants", ops_pb2.TenantsRequest()), render_tenants)
    return 0


def render_tenants(doc: dict) -> str:
    rows = [(t["name"], t["parent"] or "—", t["weight"], format_uj(t["guarantee_uj"]), format_uj(t["usage_uj"]),
             format_uj(t["borrowed_uj"]), t["guarantee_mdev"], t["usage_mdev"], format_uj(t["measured_uj"]),
             grade_label(t["measured_grade"]))
            for t in doc["tenants"]]
    return table(("tenant", "parent", "weight", "guarantee", "usage", "borrowed", "guarantee mdev", "usage mdev",
                  "measured", "grade"), rows)


# -- workers ------------------------------------------------------------------

def _workers(args: Any) -> int:
    if args.action is None:
        emit(args, _ask_all(args, "Workers", ops_pb2.WorkersRequest(), "workers"), render_workers)
        return 0
    if not args.host:
        raise CtlError("USAGE", f"workers {args.action} needs a HOST")
    worker = _ask(args, "Cordon", ops_pb2.CordonRequest(worker=args.host, cordoned=args.action != "uncordon"))
    if args.action == "drain" and args.wait:
        worker = _drained(args, worker)
    emit(args, worker, lambda w: render_workers({"workers": [w]}))
    return 0


def _drained(args: Any, worker: dict) -> dict:
    """Poll until the host holds no claim (it is cordoned, so none arrives)."""
    deadline = time.monotonic() + args.wait_timeout if args.wait_timeout else None
    while worker["active_claims"]:
        if deadline is not None and time.monotonic() > deadline:
            raise CtlError("DRAIN_TIMEOUT", f"{args.host} still holds {', '.join(worker['active_claims'])} after "
                           f"{args.wait_timeout:g} s; it stays cordoned", EXIT_FAILED)
        time.sleep(0.5)
        worker = next(w for w in _ask_all(args, "Workers", ops_pb2.WorkersRequest(), "workers")["workers"]
                      if w["worker"] == args.host)
    return worker


def _free(w: dict, field: str) -> str:
    capacity = ((w["capacity"] or {}).get("resources") or {}).get(field, 0)
    return f"{(w['available'] or {}).get(field, 0)}/{capacity}"


def render_workers(doc: dict) -> str:
    rows = []
    for w in doc["workers"]:
        cap = w["capacity"] or {}
        limit = cap.get("max_concurrency") or "∞"
        types = ", ".join(((cap.get("resources") or {}).get("gpu_types")) or []) or None
        gpus = " ".join(f"{g['free_mdev']}" for g in w["gpus"]) or None
        omitted = w.get("active_claims_omitted") or 0   # ids past the page size, counted (ops.proto)
        rows.append((w["worker"], "live" if w["live"] else "down", "cordoned" if w["cordoned"] else "no",
                     f"{len(w['active_claims']) + omitted}/{limit}", yes_no(w["exclusive"]), types, gpus,
                     _free(w, "cpu_millis"), _free(w, "memory_mb"), _free(w, "disk_mb"),
                     ", ".join(w["active_claims"]) + (f" (+{omitted} more)" if omitted else "") or None))
    return table(("worker", "agent", "cordoned", "claims", "exclusive", "gpu types", "free mdev per gpu",
                  "cpu millis free", "memory mb free", "disk mb free", "active claims"), rows)


# -- explain ------------------------------------------------------------------

def _explain(args: Any) -> int:
    emit(args, _ask(args, "Explain", ops_pb2.ExplainRequest(claim_id=args.claim_id, tenant=args.tenant)),
         render_explain)
    return 0


_DEVICE_STEPS = ("DEVICES_ENTITLEMENT_CHECK",)
# the figures each check compares (the others are not part of it and print as —)
_FIGURES = {"VALIDATE": ("hold",), "GANG_COMPLETE": (),
            "DEVICES_ENTITLEMENT_CHECK": ("guarantee", "usage", "hold", "surplus", "limit"),
            "ENERGY_OWN_PASS_CHECK": ("guarantee", "usage", "hold"), "ESTIMATOR_GRADE_CHECK": ("hold",),
            "ENERGY_SURPLUS_PASS_CHECK": ("guarantee", "usage", "hold", "surplus", "limit"), "PLACEMENT_CHECK": ()}


def _figure(check: dict, key: str) -> str | None:
    """A check's figure in its unit (milli-devices for the devices check, else
    energy); — for a check never evaluated or a figure it does not compare."""
    value = check[key]
    if not check["evaluated"] or value is None or key not in _FIGURES.get(check["step"], (key,)):
        return None
    return f"{value} mdev" if check["step"] in _DEVICE_STEPS else format_uj(value)


def explain_head(doc: dict) -> str:
    head = f"claim {doc['claim_id']}: {doc['state']}, reason {doc['reason'] or '—'}"
    if doc["queue_position"]:
        head += f", position {doc['queue_position']} in the queue"
    if doc["worker"]:
        head += f", on {doc['worker']} (" + ", ".join(f"{d} {m} mdev" for d, m in doc["devices_mdev"].items()) + ")"
    if doc["gpu_types"]:
        head += f"; accepts GPU types {', '.join(doc['gpu_types'])}"
    if doc["gang_member"] and doc["gang_member"] != doc["claim_id"]:
        head += (f"\nits gang is decided whole: the checks below are member {doc['gang_member']}'s, the first "
                 "that cannot be admitted after the members before it")
    return head


def render_explain(doc: dict) -> str:
    checks = table(("check", "ok", "reason", "node", "guarantee", "usage", "hold", "surplus", "limit", "grade",
                    "detail"),
                   [(c["step"], _ok(c), c["reason"], c["node"], _figure(c, "guarantee"), _figure(c, "usage"),
                     _figure(c, "hold"), _figure(c, "surplus"), _figure(c, "limit"), grade_label(c["grade"]),
                     c["detail"]) for c in doc["checks"]]) if doc["checks"] else "no checks: nothing was judged"
    parts = [explain_head(doc), checks]
    if doc["workers"]:
        parts.append(table(("worker", "ok", "reason", "gpu types", "field", "requested", "capacity", "reserved",
                            "before", "after", "short", "detail"),
                           [(w["worker"], yes_no(w["ok"]), w["reason"], ", ".join(w["gpu_types"]), f["field"],
                             f["requested"], f["capacity"], f["reserved"], f["available_before"],
                             f["available_after"], f["shortfall"], w["detail"])
                            for w in doc["workers"] for f in w["fields"]]))
    return "\n\n".join(parts)


def _ok(check: dict) -> str:
    return "not evaluated" if not check["evaluated"] else yes_no(check["ok"])


# -- splits -------------------------------------------------------------------

def _splits(args: Any) -> int:
    request = ops_pb2.SplitsRequest(tenant=args.tenant, since_ns=args.since, device_id=args.device)
    doc = splits_doc(ops_pb2_grpc.OperationsStub(channel(args)), request)
    if args.plot:
        from scheduler.ctl import plots   # here, not at the top: only --plot draws
        plots.splits(doc, args.plot)
    emit(args, doc, render_splits)
    if args.plot and output(args) != "json":
        print(f"plot written to {args.plot}")
    return 0


def splits_doc(stub: ops_pb2_grpc.OperationsStub, request: ops_pb2.SplitsRequest) -> dict:
    """Every page of a Splits call as one document: rows, gaps and device
    totals from every page, the tenant totals (over every page) from the
    first; labelled."""
    answers = [to_doc(a) for a in pages(stub.Splits, request)]
    first = answers[0]
    return label_unallocated({"rows": [r for a in answers for r in a["rows"]], "totals": first["totals"],
                              "devices": [d for a in answers for d in a["devices"]],
                              "gaps": [g for a in answers for g in a["gaps"]]})


def label_unallocated(doc: dict) -> dict:
    """Split rows and totals without a tenant are the devices' unallocated
    remainder (or a claim no longer known): named UNALLOCATED in both."""
    for item in (*doc["rows"], *doc["totals"]):
        item["tenant"] = item["tenant"] or UNALLOCATED
    return doc


def unaccounted_s(ns: int) -> str:
    """Device time with no figure, in seconds (display only)."""
    return f"{ns / 1e9:.3f} s"


def render_split_totals(totals: list[dict]) -> str:
    return table(("tenant", "energy", "grade", "unaccounted"),
                 [(t["tenant"], format_uj(t["uj"]), grade_label(t["grade"]),
                   unaccounted_s(t["unaccounted_ns"])) for t in totals])


def render_splits(doc: dict) -> str:
    totals = render_split_totals(doc["totals"])
    devices = table(("worker", "device", "energy", "grade", "unaccounted", "lost windows"),
                    [(d["worker"], d["device_id"], format_uj(d["uj"]), grade_label(d["grade"]),
                      unaccounted_s(d["unaccounted_ns"]), d["lost_windows"]) for d in doc["devices"]])
    rows = table(("tenant", "claim", "worker", "device", "start_ns", "end_ns", "energy", "grade"),
                 [(r["tenant"], r["claim_id"], r["worker"], r["device_id"], r["start_ns"], r["end_ns"],
                   format_uj(r["uj"]), grade_label(r["grade"])) for r in doc["rows"]])
    parts = [totals, devices, rows]
    if doc["gaps"]:
        parts.append(table(("worker", "device", "start_ns", "end_ns", "unaccounted", "gap", "lost windows"),
                           [(g["worker"], g["device_id"], g["start_ns"], g["end_ns"],
                             unaccounted_s(g["end_ns"] - g["start_ns"]), g["reason"], g["lost_windows"])
                            for g in doc["gaps"]]))
    return "\n\n".join(parts)


# -- preemption and reclamation -----------------------------------------------

def _preemption(args: Any) -> int:
    emit(args, _ask_all(args, "PreemptionOrder", ops_pb2.PreemptionOrderRequest(for_claim_id=args.for_claim),
                        "order", "victims"),
         lambda doc: render_preemption(doc, args.for_claim))
    return 0


def render_preemption(doc: dict, for_claim: str = "") -> str:
    rows = [(v["claim_id"], v["tenant"], v["tier"], format_uj(v["measured_uj"]), v["completed_units"],
             v["priority"], v["admitted_seq"], yes_no(v["claim_id"] in doc["victims"]))
            for v in doc["order"]]
    text = table(("claim", "tenant", "tier", "measured", "units", "priority", "admitted", "victim"), rows)
    if not for_claim:
        return text
    victims = ", ".join(doc["victims"]) or "none"
    head = f"for {for_claim}: reason {doc['reason'] or '—'}; victims: {victims}"
    if not doc["order"]:
        head += f"\nno admitted claim may be preempted for {for_claim} (RULES §6: only to reclaim lent " \
                "capacity for a claim within its own guarantee, or by priority within one tenant)"
    return f"{head}\n\n{text}"


def _reclamation(args: Any) -> int:
    doc = _ask_all(args, "ReclamationOrder", ops_pb2.ReclamationOrderRequest(), "verdicts", "order")
    if args.plot:
        from scheduler.ctl import plots
        plots.reclamation(doc, args.plot)
    emit(args, doc, render_reclamation)
    if args.plot and output(args) != "json":
        print(f"plot written to {args.plot}")
    return 0


def render_reclamation(doc: dict) -> str:
    rows = [(v["claim_id"], v["verdict"], format_uw(v["mean_uw"]), grade_label(v["grade"]),
             format_uw(v["threshold_uw"] or None), v["held_mdev"],
             (doc["order"].index(v["claim_id"]) + 1) if v["claim_id"] in doc["order"] else "—")
            for v in doc["verdicts"]]
    return table(("claim", "verdict", "mean", "grade", "threshold", "mdev", "order"), rows)


def _reclaim(args: Any) -> int:
    emit(args, _ask(args, "Reclaim", ops_pb2.ReclaimRequest()),
         lambda doc: "reclaimed: " + (", ".join(doc["reclaimed"]) or "nothing"))
    return 0


def _estimate(args: Any) -> int:
    emit(args, _ask(args, "Estimate", ops_pb2.EstimateRequest(work_class=args.work_class)), render_estimate)
    return 0


def render_estimate(doc: dict) -> str:
    figure = format_uj(doc["estimate_uj"]) if doc["estimate_uj"] is not None else "none derived"
    return (f"{doc['work_class']}: {figure} ({grade_label(doc['grade']) or 'no grade'}); observations "
            f"{doc['observations']}, excluded as Estimator {doc['excluded_estimator']}, eligible {doc['eligible']}, "
            f"required {doc['required']}")
