"""The shipped Grafana dashboard against a real Prometheus scraping a real
scheduler and an agent replaying the H200 trace: every panel's PromQL
returns at least one series, and no NaN, on an idle cluster (nothing
submitted yet) and then on a busy one; nothing is fabricated for a panel to
have data. And the plots, drawn from real runs, carry the data of the
command they came from; the splits plot draws a real gap (the agent killed
for a few seconds) as a gap.

Needs the `prometheus` binary (Debian's package: `apt-get install
prometheus`; .ci/run installs it) and matplotlib (`pip install -e .[dev]`)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from protos.pool.v1 import agent_pb2, claims_pb2, ops_pb2, types_pb2
from scheduler.ctl.dashboard import dashboard
from scheduler.ctl import plots
from scheduler.ctl.plots import DATA_KEY, reclamation_points, splits_series

from .conftest import BIN, TREE, free_port, wait_for

PROMETHEUS = shutil.which("prometheus")
IDLE = """
[idle]
window_ns = 2_000_000_000
[[idle.thresholds]]
device_kind = "replay"
uw = 200_000_000
"""


def _query(base: str, expr: str) -> list:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as answer:
        body = json.load(answer)
    assert body["status"] == "success", body
    return body["data"]["result"]


def _png_data(path: Path):
    from PIL import Image
    with Image.open(path) as image:
        return json.loads(image.text[DATA_KEY])


@pytest.fixture
def metered(cluster):
    """A scheduler and a replaying agent, both exporting metrics, idle: nothing submitted."""
    scheduler_metrics, agent_metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    s = cluster(tree=TREE + IDLE, metrics=scheduler_metrics)
    cluster.agent(s, "host-a", speed=3.0, metrics=agent_metrics)   # the trace lasts ~27 s at 3x
    wait_for("the agent", lambda: any(w.live for w in s.ops.Workers(ops_pb2.WorkersRequest(), timeout=5).workers))
    return s, scheduler_metrics, agent_metrics


def busy(s) -> None:
    """An admitted, a pending, a released and a refused claim, and windows measured under them."""
    for claim_id in ("busy", "done"):
        s.claims.Submit(claims_pb2.SubmitRequest(claim_id=claim_id, tenant="alpha", estimate_uj=5_000_000,
                                                 resources=types_pb2.Resources(gpu_mdev=300)), timeout=10)
    s.claims.Submit(claims_pb2.SubmitRequest(claim_id="waits", tenant="beta", estimate_uj=90_000_000_000),
                    timeout=10)
    s.poolctl("submit", "x", "--tenant", "nobody", "--estimate-uj", "1", check=False)   # a refusal, by code
    wait_for("metered windows", lambda: len(s.ops.Splits(ops_pb2.SplitsRequest(), timeout=5).rows) >= 12)
    s.claims.Release(claims_pb2.ReleaseRequest(claim_id="done"), timeout=10)


@contextlib.contextmanager
def prometheus(tmp_path: Path, targets: tuple[str, ...]) -> Iterator[str]:
    """A real Prometheus on a loopback port scraping `targets` every second; its base URL."""
    port = free_port()
    config = tmp_path / "prometheus.yml"
    jobs = "".join(f"""
  - job_name: target-{n}
    static_configs: [{{targets: ["{target}"]}}]""" for n, target in enumerate(targets))
    config.write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:{jobs}
""")
    log = open(tmp_path / "prometheus.log", "w")
    process = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                f"--web.listen-address=127.0.0.1:{port}"],
                               stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        def scraped() -> bool:
            try:
                up = _query(base, "count_over_time(up[1m]) >= 4")
            except OSError:
                return False
            return len(up) == len(targets)
        wait_for("Prometheus to scrape every target four times", scraped, timeout_s=60)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()


def every_panel_has_a_series(base: str, when: str) -> None:
    """Every target of every panel returns a series, none of them NaN (a rate
    or increase needs two scrapes of a series: up to 30 s for one that came late)."""
    panels = dashboard()["panels"]
    assert panels and all(p["targets"] for p in panels)

    def missing() -> list:
        out = []
        for p in panels:
            for t in p["targets"]:
                series = _query(base, t["expr"])
                if not series or any(math.isnan(float(r["value"][1])) for r in series):
                    out.append((p["title"], t["expr"], series))
        return out
    deadline = time.monotonic() + 30
    while (empty := missing()) and time.monotonic() < deadline:
        time.sleep(1)
    if empty:
        with urllib.request.urlopen(f"{base}/api/v1/label/__name__/values", timeout=10) as answer:
            names = json.load(answer)["data"]
        raise AssertionError(f"{when}: panels with no series or NaN: {empty}; Prometheus has {names}")


@pytest.mark.skipif(PROMETHEUS is None, reason="needs Prometheus: apt-get install prometheus (Debian's package), "
                    "as .ci/run does, then run this test again")
def test_every_dashboard_panel_returns_a_series_on_an_idle_and_on_a_busy_cluster(metered, tmp_path):
    s, scheduler_metrics, agent_metrics = metered
    with prometheus(tmp_path, (scheduler_metrics, agent_metrics)) as base:
        every_panel_has_a_series(base, "idle")
        assert {r["metric"]["reason"] for r in _query(base, "pool_host_unaccounted_seconds_total")} >= \
            {"AgentDown", "CounterReset", "MeterError"}, "0 for every registered host and gap reason"
        assert _query(base, "sum(pool_host_unaccounted_seconds_total)")[0]["value"][1] == "0"
        busy(s)
        every_panel_has_a_series(base, "busy")
        if os.environ.get("POOL_DOCS_IMAGES"):
            _render_panels(base, dashboard()["panels"], Path(os.environ["POOL_DOCS_IMAGES"]))


def test_the_plots_carry_the_data_of_their_command(metered, tmp_path):
    s, _, _ = metered
    busy(s)
    png = tmp_path / "splits.png"
    done = s.poolctl("splits", "--plot", str(png), "-o", "json")
    doc = json.loads(done.stdout)
    drawn = _png_data(png)
    assert drawn == json.loads(json.dumps(splits_series(doc)))
    assert "(unallocated)" in drawn["tenants"] and "alpha" in drawn["tenants"]
    totals = {t["tenant"]: t["uj"] for t in doc["totals"]}
    for tenant, figures in drawn["tenants"].items():   # the energy drawn is the energy measured
        assert abs([j for j in figures["j"] if j is not None][-1] * 1_000_000 - totals[tenant]) < 1, tenant

    png = tmp_path / "reclamation.png"
    doc = json.loads(s.poolctl("reclamation-order", "--plot", str(png), "-o", "json").stdout)
    points = _png_data(png)
    assert points == reclamation_points(doc)
    assert [p["claim_id"] for p in points] == ["busy"]
    verdict = next(v for v in doc["verdicts"] if v["claim_id"] == "busy")
    assert points[0]["verdict"] == verdict["verdict"] and points[0]["threshold_w"] == 60.0   # 200 W × 0.3 GPU
    assert "plot written to" in s.poolctl("reclamation-order", "--plot", str(png)).stdout


def test_the_splits_plot_draws_a_real_gap_as_a_gap(cluster, tmp_path):
    """The agent killed for two seconds while the counter's driver reloads:
    one gap. The plot's lines stop at it and start again after it, its span
    is shaded and labelled, power is in watts per tenant, and the legend is
    outside the axes. Read from matplotlib's own artists, not the file alone."""
    s = cluster()
    origin = time.time_ns()
    args = ("--replay-origin-unix-ns", str(origin), "--window-ms", "500")
    a = cluster.agent(s, "host-a", speed=1, args=args)
    wait_for("the agent", lambda: any(w.live for w in s.ops.Workers(ops_pb2.WorkersRequest(), timeout=5).workers))
    s.claims.Submit(claims_pb2.SubmitRequest(claim_id="half", tenant="alpha", estimate_uj=5_000_000,
                                             resources=types_pb2.Resources(gpu_mdev=500)), timeout=10)
    wait_for("windows before the gap", lambda: sum(r["tenant"] == "alpha" for r in s.json("splits")["rows"]) >= 4)
    a.kill()
    reload_ms = (time.time_ns() - origin) // 1_000_000 + 200   # the counter resets while nobody measures
    down = time.monotonic()
    wait_for("two seconds with the agent down", lambda: time.monotonic() - down >= 2)
    a = cluster.agent(s, "host-a", speed=1, args=(*args, "--replay-reload-at-ms", str(reload_ms)))

    def gap_then_windows() -> bool:
        doc = s.json("splits")
        return bool(doc["gaps"]) and sum(r["start_ns"] >= doc["gaps"][-1]["end_ns"] for r in doc["rows"]) >= 4
    wait_for("the gap and windows after it", gap_then_windows)
    a.stop()
    png = tmp_path / "splits.png"
    doc = json.loads(s.poolctl("splits", "--plot", str(png), "-o", "json").stdout)
    assert _png_data(png) == json.loads(json.dumps(splits_series(doc)))
    [gap] = doc["gaps"]
    fig, series = plots.splits_figure(doc)
    [(g0, g1)] = [g["t_s"] for g in series["gaps"]]
    assert g1 - g0 >= 2 and g1 - g0 == pytest.approx((gap["end_ns"] - gap["start_ns"]) / 1e9, abs=1e-6)
    power, energy = fig.axes
    fig.canvas.draw()
    for ax in (power, energy):
        assert len(ax.lines) == len(series["tenants"]) >= 2
        for line in ax.lines:
            xs = [float(x) for x in line.get_xdata()]
            drawn = [(x0, x1) for x0, x1 in zip(xs, xs[1:]) if not (math.isnan(x0) or math.isnan(x1))]
            assert all(x1 <= g0 or x0 >= g1 for x0, x1 in drawn), "no segment across the gap"
            assert min(x0 for x0, _ in drawn) < g0 and max(x1 for _, x1 in drawn) > g1, "drawn on both sides"
        [shade] = ax.patches
        assert (shade.get_x(), shade.get_x() + shade.get_width()) == pytest.approx((g0, g1))
        assert not fig.legends[0].get_window_extent().overlaps(ax.get_window_extent()), "the legend is outside"
    assert any("gap: COUNTER_RESET" in t.get_text() for t in power.texts)
    assert power.get_ylabel() == "power (W)"
    drawn = [sum(ws) for ws in zip(*(t["w"] for t in series["tenants"].values())) if None not in ws]
    assert 50 < max(drawn) < 2000, "the device's draw (its tenants' power summed) is an H200's, in watts"
    plots._pyplot().close(fig)
    if os.environ.get("POOL_DOCS_IMAGES"):   # the picture docs/USER-GUIDE.md shows
        shutil.copy(png, Path(os.environ["POOL_DOCS_IMAGES"]) / "splits.png")


def test_a_plot_without_matplotlib_is_one_line(cluster, tmp_path):
    s = cluster()
    shadow = tmp_path / "shadow"
    (shadow / "matplotlib").mkdir(parents=True)
    (shadow / "matplotlib" / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = {**s.env(), "PYTHONPATH": os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([str(BIN / "poolctl"), "splits", "--plot", str(tmp_path / "x.png")], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 2 and done.stderr.strip() == (
        "poolctl: PLOT_UNAVAILABLE: plots need matplotlib: pip install 'pool[plot]'")


def _render_panels(base: str, panels: list, out: Path) -> None:
    """Draw a few panels from Prometheus's range queries, as docs/OPERATIONS.md shows them."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    chosen = [p for p in panels if p["title"] in ("Power per device", "Tenant usage against guarantee",
                                                    "Windows ingested, gaps and unaccounted seconds", "Idle verdicts")]
    end = time.time()
    fig, axes = plt.subplots(2, 2, figsize=(15, 6))
    for ax, panel in zip(axes.flat, chosen):
        for target in panel["targets"]:
            url = f"{base}/api/v1/query_range?" + urllib.parse.urlencode(
                {"query": target["expr"], "start": end - 60, "end": end, "step": 1})
            with urllib.request.urlopen(url, timeout=10) as answer:
                for series in json.load(answer)["data"]["result"]:
                    xs = [float(t) - end for t, _ in series["values"]]
                    label = target["legendFormat"]
                    for key, value in series["metric"].items():
                        label = label.replace("{{" + key + "}}", value)
                    ax.plot(xs, [float(v) for _, v in series["values"]], label=label)
        ax.set_title(panel["title"], fontsize="medium")
        ax.set_xlabel("seconds")
        ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))   # outside the data
    fig.text(0.01, 0.005, "Rendered by tests/e2e/test_dashboard.py (POOL_DOCS_IMAGES=docs/images): range queries "
             "to a real Prometheus scraping a scheduler and an agent replaying the bundled H200 trace, "
             + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(end)), fontsize="x-small", color="0.3")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "dashboard-panels.png", dpi=80)
    plt.close(fig)
