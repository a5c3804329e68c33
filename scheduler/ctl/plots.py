"""`--plot FILE.png` for splits and reclamation-order, drawn with matplotlib
(the optional extra `pool[plot]`) on the headless Agg backend.

Each plot's data is computed here from the command's own JSON document, by a
plain function (`splits_series`, `reclamation_points`), and written into the
PNG as a text chunk (`pool:data`), so what was drawn can be read back and
checked."""

from __future__ import annotations

import json
import math
from bisect import bisect_left
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
    """Per tenant, power (W) and cumulative energy (J) over time, and the gaps.

    Every window boundary of every device cuts the time axis into spans
    (`t_s`, seconds since the first window or gap); a window spreads its
    energy evenly over the spans it covers. A span no window covers was
    measured by nobody: it has no figure (null), and what is drawn breaks
    there; `gaps` are the spans the agents reported with no figure, by device
    and why. `w[i]` is a tenant's mean power over span i, `j[i]` its energy
    from the first span to the end of span i (the unallocated remainder is a
    tenant like the others)."""
    rows, gaps = doc["rows"], doc.get("gaps") or []
    if not rows:
        return {"t_s": [], "tenants": {}, "gaps": []}
    origin = min([r["start_ns"] for r in rows] + [g["start_ns"] for g in gaps])
    edges = sorted({e for r in rows for e in (r["start_ns"], r["end_ns"])})
    spans = list(zip(edges, edges[1:]))
    measured = [False] * len(spans)
    energy: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(spans))   # µJ per span
    for r in rows:
        first, last = bisect_left(edges, r["start_ns"]), bisect_left(edges, r["end_ns"])
        per_ns = r["uj"] / (r["end_ns"] - r["start_ns"])
        mine = energy[r["tenant"]]
        for i in range(first, last):
            measured[i] = True
            mine[i] += per_ns * (spans[i][1] - spans[i][0])
    tenants = {}
    for tenant, uj in sorted(energy.items()):
        total, watts, joules = 0.0, [], []
        for i, (start, end) in enumerate(spans):
            total += uj[i]
            watts.append(uj[i] / UJ_PER_J / ((end - start) / NS_PER_S) if measured[i] else None)
            joules.append(total / UJ_PER_J if measured[i] else None)
        tenants[tenant] = {"w": watts, "j": joules}
    return {"t_s": [[(a - origin) / NS_PER_S, (b - origin) / NS_PER_S] for a, b in spans], "tenants": tenants,
            "gaps": [{"t_s": [(g["start_ns"] - origin) / NS_PER_S, (g["end_ns"] - origin) / NS_PER_S],
                      "device_id": g["device_id"], "reason": g["reason"]} for g in gaps]}


def _runs(spans: list[list[float]], watts: list[float | None], joules: list[float | None] | None = None
          ) -> tuple[list[float], list[float]]:
    """The x and y of a line over the spans with a figure, with NaN between
    runs (matplotlib draws nothing across a NaN): power as a step per span,
    or with `joules`, the cumulative energy from each run's start through
    every span's end."""
    xs: list[float] = []
    ys: list[float] = []
    previous_end = None
    for i, ((start, end), w) in enumerate(zip(spans, watts)):
        if w is None:
            continue
        if previous_end is not None and start != previous_end:
            xs.append(math.nan)
            ys.append(math.nan)
        if joules is None:
            xs += [start, end]
            ys += [w, w]
        else:
            if start != previous_end:   # a run starts: from the energy before this span
                xs.append(start)
                ys.append(joules[i] - w * (end - start))
            xs.append(end)
            ys.append(joules[i])
        previous_end = end
    return xs, ys


def reclamation_points(doc: dict) -> list[dict[str, Any]]:
    """Each claim with a figure: mean power and threshold in watts, and its verdict."""
    return [{"claim_id": v["claim_id"], "verdict": v["verdict"], "mean_w": v["mean_uw"] / UW_PER_W,
             "threshold_w": v["threshold_uw"] / UW_PER_W}
            for v in doc["verdicts"] if v["mean_uw"] is not None]


def _save(fig: Any, path: str, data: Any) -> None:
    try:
        fig.savefig(path, dpi=100, bbox_inches="tight", metadata={DATA_KEY: json.dumps(data, sort_keys=True)})
    except OSError as error:
        raise CtlError("PLOT_FAILED", f"cannot write {path}: {error.strerror or error}") from None


def splits_figure(doc: dict) -> tuple[Any, dict[str, Any]]:
    """The figure `poolctl splits --plot` saves, and the series it draws:
    power per tenant above, cumulative energy per tenant below, each line
    broken where nothing was measured, every gap shaded and labelled, the
    legend outside the axes."""
    plt = _pyplot()
    series = splits_series(doc)
    fig, (power, energy) = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    spans = series["t_s"]
    for n, (tenant, figures) in enumerate(series["tenants"].items()):
        colour = f"C{n % 10}"
        power.plot(*_runs(spans, figures["w"]), color=colour, label=tenant)
        energy.plot(*_runs(spans, figures["w"], figures["j"]), color=colour)
    for n, gap in enumerate(series["gaps"]):
        start, end = gap["t_s"]
        for ax in (power, energy):
            ax.axvspan(start, end, color="0.85", zorder=0, label="no figure (a gap)" if n == 0 and ax is power
                       else None)
        power.annotate(f"gap: {gap['reason'].removeprefix('GAP_')}\n{gap['device_id']}", ((start + end) / 2, 1),
                       xycoords=("data", "axes fraction"), ha="center", va="top", fontsize="x-small")
    power.set_ylabel("power (W)")
    energy.set_ylabel("energy since the first window (J)")
    energy.set_xlabel("seconds since the first window")
    power.set_title("Power and energy by tenant (unallocated included); shaded: nothing measured", fontsize="medium")
    if series["tenants"] or series["gaps"]:
        fig.legend(loc="upper left", bbox_to_anchor=(1.0, 0.95), fontsize="small", title="tenant")
    fig.tight_layout()
    return fig, series


def splits(doc: dict, path: str) -> dict[str, Any]:
    plt = _pyplot()
    fig, series = splits_figure(doc)
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
