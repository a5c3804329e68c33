"""poolctl verbs for operators: tenants, workers, explain, splits, preemption and
reclamation order, reclaim, estimate."""

from __future__ import annotations

import argparse
from typing import Any

from protos.energy import format_uj, format_uw
from protos.pool.v1 import ops_pb2, ops_pb2_grpc
from scheduler.ctl.output import emit, table
from scheduler.ctl.wire import call, channel, online_verb, to_doc


def register(verbs: argparse._SubParsersAction) -> None:
    online_verb(verbs, "tenants", "the entitlement tree: guarantees and usage", _tenants)
    online_verb(verbs, "workers", "worker capacity, reserved, available, active claims", _workers)
    p = online_verb(verbs, "explain", "why a claim is (not) admitted", _explain)
    p.add_argument("claim_id")
    p = online_verb(verbs, "splits", "per-tenant joule splits by device and window", _splits)
    p.add_argument("--tenant", default="")
    p.add_argument("--since", type=int, default=0, metavar="UNIX_NS")
    p.add_argument("--device", default="")
    p = online_verb(verbs, "preemption-order", "who would be preempted, worst first", _preemption)
    p.add_argument("--for", dest="for_claim", default="", metavar="CLAIM_ID")
    online_verb(verbs, "reclamation-order", "idle verdicts and the reclamation order", _reclamation)
    online_verb(verbs, "reclaim", "settle every Idle claim as RECLAIMED", _reclaim)
    p = online_verb(verbs, "estimate", "the derived estimate of a work class", _estimate)
    p.add_argument("work_class")


def _ask(args: Any, method: str, request: Any) -> dict:
    stub = ops_pb2_grpc.OperationsStub(channel(args))
    return to_doc(call(getattr(stub, method), request))


def _tenants(args: Any) -> int:
    emit(args, _ask(args, "Tenants", ops_pb2.TenantsRequest()), render_tenants)
    return 0


def render_tenants(doc: dict) -> str:
    rows = [(t["name"], t["parent"] or "—", t["weight"], format_uj(t["guarantee_uj"]), format_uj(t["usage_uj"]),
             format_uj(t["borrowed_uj"]), t["guarantee_mdev"], t["usage_mdev"], format_uj(t["measured_uj"]),
             t["measured_grade"])
            for t in doc["tenants"]]
    return table(("tenant", "parent", "weight", "guarantee", "usage", "borrowed", "g.mdev", "u.mdev",
                  "measured", "grade"), rows)


def _workers(args: Any) -> int:
    emit(args, _ask(args, "Workers", ops_pb2.WorkersRequest()), render_workers)
    return 0


_FIELDS = ("cpu_millis", "memory_mb", "disk_mb", "gpu_mdev")


def render_workers(doc: dict) -> str:
    rows = []
    for w in doc["workers"]:
        cap = (w["capacity"] or {}).get("resources") or {}
        for field in _FIELDS:
            rows.append((w["worker"], field, cap.get(field, 0), (w["reserved"] or {}).get(field, 0),
                         (w["available"] or {}).get(field, 0), ",".join(w["active_claims"]) or "—",
                         "live" if w["live"] else "down"))
    return table(("worker", "field", "capacity", "reserved", "available", "active claims", "agent"), rows)


def _explain(args: Any) -> int:
    emit(args, _ask(args, "Explain", ops_pb2.ExplainRequest(claim_id=args.claim_id)), render_explain)
    return 0


def render_explain(doc: dict) -> str:
    head = f"claim {doc['claim_id']}: {doc['state']}, reason {doc['reason']}"
    if doc["queue_position"]:
        head += f", position {doc['queue_position']} in the queue"
    checks = table(("check", "ok", "node", "guarantee", "usage", "hold", "surplus", "limit", "grade", "detail"),
                   [(c["step"], _ok(c), c["node"], c["guarantee"], c["usage"], c["hold"], c["surplus"],
                     c["limit"], c["grade"], c["detail"]) for c in doc["checks"]])
    workers = table(("worker", "ok", "reason", "field", "requested", "capacity", "reserved", "before",
                     "after", "short"),
                    [(w["worker"], w["ok"], w["reason"], f["field"], f["requested"], f["capacity"], f["reserved"],
                      f["available_before"], f["available_after"], f["shortfall"])
                     for w in doc["workers"] for f in w["fields"]])
    return "\n\n".join((head, checks, workers))


def _ok(check: dict) -> str:
    return "—" if not check["evaluated"] else ("yes" if check["ok"] else "NO")


def _splits(args: Any) -> int:
    request = ops_pb2.SplitsRequest(tenant=args.tenant, since_ns=args.since, device_id=args.device)
    emit(args, _ask(args, "Splits", request), render_splits)
    return 0


def tenant_label(tenant: str) -> str:
    """Split rows without a tenant are the devices' unallocated remainder (or a
    claim no longer known)."""
    return tenant or "(unallocated)"


def unaccounted_s(ns: int) -> str:
    """Device time with no figure, in seconds (display only)."""
    return f"{ns / 1e9:.3f} s"


def render_split_totals(totals: list[dict]) -> str:
    return table(("tenant", "energy", "µJ", "grade", "unaccounted"),
                 [(tenant_label(t["tenant"]), format_uj(t["uj"]), t["uj"], t["grade"],
                   unaccounted_s(t["unaccounted_ns"])) for t in totals])


def render_splits(doc: dict) -> str:
    totals = render_split_totals(doc["totals"])
    devices = table(("worker", "device", "energy", "µJ", "grade", "unaccounted", "lost windows"),
                    [(d["worker"], d["device_id"], format_uj(d["uj"]), d["uj"], d["grade"],
                      unaccounted_s(d["unaccounted_ns"]), d["lost_windows"]) for d in doc["devices"]])
    rows = table(("tenant", "claim", "worker", "device", "start_ns", "end_ns", "µJ", "grade"),
                 [(tenant_label(r["tenant"]), r["claim_id"], r["worker"], r["device_id"], r["start_ns"], r["end_ns"], r["uj"],
                   r["grade"]) for r in doc["rows"]])
    parts = [totals, devices, rows]
    if doc["gaps"]:
        parts.append(table(("worker", "device", "start_ns", "end_ns", "unaccounted", "gap", "lost windows"),
                           [(g["worker"], g["device_id"], g["start_ns"], g["end_ns"],
                             unaccounted_s(g["end_ns"] - g["start_ns"]), g["reason"], g["lost_windows"])
                            for g in doc["gaps"]]))
    return "\n\n".join(parts)


def _preemption(args: Any) -> int:
    emit(args, _ask(args, "PreemptionOrder", ops_pb2.PreemptionOrderRequest(for_claim_id=args.for_claim)),
         render_preemption)
    return 0


def render_preemption(doc: dict) -> str:
    rows = [(v["claim_id"], v["tenant"], v["tier"], format_uj(v["measured_uj"]), v["completed_units"],
             v["priority"], v["admitted_seq"], "victim" if v["claim_id"] in doc["victims"] else "")
            for v in doc["order"]]
    return table(("claim", "tenant", "tier", "measured", "units", "priority", "admitted", ""), rows)


def _reclamation(args: Any) -> int:
    emit(args, _ask(args, "ReclamationOrder", ops_pb2.ReclamationOrderRequest()), render_reclamation)
    return 0


def render_reclamation(doc: dict) -> str:
    rows = [(v["claim_id"], v["verdict"], format_uw(v["mean_uw"]), v["grade"], format_uw(v["threshold_uw"] or None),
             v["held_mdev"], (doc["order"].index(v["claim_id"]) + 1) if v["claim_id"] in doc["order"] else "—")
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
    return (f"{doc['work_class']}: {figure} ({doc['grade'] or 'no grade'}); observations {doc['observations']}, "
            f"excluded as Estimator {doc['excluded_estimator']}, eligible {doc['eligible']}, "
            f"required {doc['required']}")
