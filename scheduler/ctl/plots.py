"""`--plot FILE.png` for splits and reclamation-order, drawn with matplotlib
(the optional extra `pool[plot]`) on the headless Agg backend.

Each plot's data is computed here from the command's own JSON document, by a
plain function (`splits_series`, `reclamation_points`), and written into the
PNG as a text chunk (`pool:data`), so what was drawn can be read back and
checked."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from scheduler.ctl.output import CtlError

NS_PER_S = 1_000_000_000
UJ_PER_J = 1_000_000
UW_PER_W = 1_000_000
VERDICT_COLOURS = {"IDLE": "tab:red", "BUSY": "tab:green", "UNKNOWN": "tab:gray", "NO_VERDICT": "tab:blue",
                   "NOTHING_HELD": "tab:olive"}
DATA_KEY = "pool:data"


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise CtlError("PLOT_UNAVAILABLE", "plots need matplotlib: pip install 'pool[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def splits_series(doc: dict) -> dict[str, Any]:
    """Energy per tenant per window end, in joules: {"t_s": [...], "tenants":
    {tenant: [...]}} with t_s seconds since the first window's start. The
    unallocated remainder is a tenant like the others."""
    rows = doc["rows"]
    if not rows:
        return {"t_s": [], "tenants": {}}
    origin = min(r["start_ns"] for r in rows)
    ends = sorted({r["end_ns"] for r in rows})
    at = {end: i for i, end in enumerate(ends)}
    tenants: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(ends))
    for r in rows:
        tenants[r["tenant"]][at[r["end_ns"]]] += r["uj"] / UJ_PER_J
    return {"t_s": [(e - origin) / NS_PER_S for e in ends], "tenants": dict(sorted(tenants.items()))}


def reclamation_points(doc: dict) -> list[dict[str, Any]]:
    """Each claim with a figure: mean power and threshold in watts, and its verdict."""
    return [{"claim_id": v["claim_id"], "verdict": v["verdict"], "mean_w": v["mean_uw"] / UW_PER_W,
             "threshold_w": v["threshold_uw"] / UW_PER_W}
            for v in doc["verdicts"] if v["mean_uw"] is not None]


def _save(fig: Any, path: str, data: Any) -> None:
    try:
        fig.savefig(path, dpi=100, metadata={DATA_KEY: json.dumps(data, sort_keys=True)})
    except OSError as error:
        raise CtlError("PLOT_FAILED", f"cannot write {path}: {error.strerror or error}") from None


def splits(doc: dict, path: str) -> dict[str, Any]:
    plt = _pyplot()
    series = splits_series(doc)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    if series["t_s"]:
        names = list(series["tenants"])
        ax.stackplot(series["t_s"], *(series["tenants"][n] for n in names), labels=names, step="pre")
        ax.legend(loc="upper left", fontsize="small")
    ax.set_xlabel("seconds since the first window")
    ax.set_ylabel("energy per window (J)")
    ax.set_title("Energy by tenant per window, stacked (unallocated included)")
    fig.tight_layout()
    _save(fig, path, series)
    plt.close(fig)
    return series


def reclamation(doc: dict, path: str) -> list[dict[str, Any]]:
    plt = _pyplot()
    points = reclamation_points(doc)
    fig, ax = plt.subplots(figsize=(7, 5))
    for verdict, colour in VERDICT_COLOURS.items():
        mine = [p for p in points if p["verdict"] == verdict]
        if mine:
            ax.scatter([p["threshold_w"] for p in mine], [p["mean_w"] for p in mine], c=colour, label=verdict)
            for p in mine:
                ax.annotate(p["claim_id"], (p["threshold_w"], p["mean_w"]), fontsize="x-small",
                            textcoords="offset points", xytext=(4, 4))
    top = max([p["mean_w"] for p in points] + [p["threshold_w"] for p in points] + [1.0])
    ax.plot([0, top * 1.1], [0, top * 1.1], "k--", linewidth=0.8, label="mean = threshold")
    ax.set_xlabel("idle threshold for the fraction held (W)")
    ax.set_ylabel(f"mean power over the idle window ({doc['window_ns'] / NS_PER_S:g} s) (W)")
    missing = [v["claim_id"] for v in doc["verdicts"] if v["mean_uw"] is None]
    ax.set_title("Idle verdicts: below the line is Idle" + (f"; no figure: {', '.join(missing)}" if missing else ""),
                 fontsize="medium")
    ax.legend(fontsize="small")
    fig.tight_layout()
    _save(fig, path, points)
    plt.close(fig)
    return points
