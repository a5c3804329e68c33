"""The shipped Grafana dashboard against a real Prometheus scraping a real
scheduler and an agent replaying the H200 trace: every panel's PromQL
returns at least one series. And the plots, drawn from the same run, carry
the data of the command they came from.

Needs the `prometheus` binary (Debian's package: `apt-get install
prometheus`; .ci/run installs it) and matplotlib (`pip install -e .[dev]`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from protos.pool.v1 import agent_pb2, claims_pb2, ops_pb2, types_pb2
from scheduler.ctl.dashboard import dashboard
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
    """A scheduler and a replaying agent, both exporting metrics, with an
    admitted, a pending, a released and a refused claim behind them."""
    scheduler_metrics, agent_metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    s = cluster(tree=TREE + IDLE, metrics=scheduler_metrics)
    cluster.agent(s, "host-a", speed=3.0, metrics=agent_metrics)   # the trace lasts ~27 s at 3x
    wait_for("the agent", lambda: any(w.live for w in s.ops.Workers(ops_pb2.WorkersRequest(), timeout=5).workers))
    for claim_id in ("busy", "done"):
        s.claims.Submit(claims_pb2.SubmitRequest(claim_id=claim_id, tenant="alpha", estimate_uj=5_000_000,
                                                 resources=types_pb2.Resources(gpu_mdev=300)), timeout=10)
    s.claims.Submit(claims_pb2.SubmitRequest(claim_id="waits", tenant="beta", estimate_uj=90_000_000_000),
                    timeout=10)
    s.poolctl("submit", "x", "--tenant", "nobody", "--estimate-uj", "1", check=False)   # a refusal, by code
    s.register("w2", gpus=1)   # a second host whose agent reports one second with no figure
    now = time.time_ns()
    s.stream("w2", [agent_pb2.Window(device_id="w2-gpu0", seq=1, start_ns=now - 1_000_000_000, end_ns=now,
                                        grade=types_pb2.GRADE_HW_SHUNT)])
    wait_for("metered windows", lambda: len(s.ops.Splits(ops_pb2.SplitsRequest(), timeout=5).rows) >= 12)
    s.claims.Release(claims_pb2.ReleaseRequest(claim_id="done"), timeout=10)
    return s, scheduler_metrics, agent_metrics


@pytest.mark.skipif(PROMETHEUS is None, reason="needs Prometheus: apt-get install prometheus (Debian's package), "
                    "as .ci/run does, then run this test again")
def test_every_dashboard_panel_returns_a_series_from_a_real_prometheus(metered, tmp_path):
    s, scheduler_metrics, agent_metrics = metered
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: pool-scheduler
    static_configs: [{{targets: ["{scheduler_metrics}"]}}]
  - job_name: pool-agent
    static_configs: [{{targets: ["{agent_metrics}"]}}]
""")
    log = open(tmp_path / "prometheus.log", "w")
    prometheus = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                   f"--web.listen-address=127.0.0.1:{port}"],
                                  stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        def scraped() -> bool:
            try:
                up = _query(base, "count_over_time(up[1m]) >= 4")
            except OSError:
                return False
            return len(up) == 2
        wait_for("Prometheus to scrape both targets four times", scraped, timeout_s=60)
        panels = dashboard()["panels"]
        assert panels and all(p["targets"] for p in panels)
        def empty() -> list:
            return [(p["title"], t["expr"]) for p in panels for t in p["targets"] if not _query(base, t["expr"])]
        deadline = time.monotonic() + 30   # a rate or increase needs two scrapes of a series that came late
        while (missing := empty()) and time.monotonic() < deadline:
            time.sleep(1)
        if missing:
            with urllib.request.urlopen(f"{base}/api/v1/label/__name__/values", timeout=10) as answer:
                names = json.load(answer)["data"]
            raise AssertionError(f"panels with no series: {missing}; Prometheus has {names}")
        if os.environ.get("POOL_DOCS_IMAGES"):
            _render_panels(base, panels, Path(os.environ["POOL_DOCS_IMAGES"]))
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=20)


def test_the_plots_carry_the_data_of_their_command(metered, tmp_path):
    s, _, _ = metered
    png = tmp_path / "splits.png"
    done = s.poolctl("splits", "--plot", str(png), "-o", "json")
    doc = json.loads(done.stdout)
    drawn = _png_data(png)
    assert drawn == json.loads(json.dumps(splits_series(doc)))
    assert "(unallocated)" in drawn["tenants"] and "alpha" in drawn["tenants"]
    totals = {t["tenant"]: t["uj"] for t in doc["totals"]}
    for tenant, joules in drawn["tenants"].items():   # stacked per window, and nothing lost on the way
        assert abs(sum(joules) * 1_000_000 - totals[tenant]) < 1, tenant
    assert len(drawn["t_s"]) == len({r["end_ns"] for r in doc["rows"]})

    png = tmp_path / "reclamation.png"
    doc = json.loads(s.poolctl("reclamation-order", "--plot", str(png), "-o", "json").stdout)
    points = _png_data(png)
    assert points == reclamation_points(doc)
    assert [p["claim_id"] for p in points] == ["busy"]
    verdict = next(v for v in doc["verdicts"] if v["claim_id"] == "busy")
    assert points[0]["verdict"] == verdict["verdict"] and points[0]["threshold_w"] == 60.0   # 200 W × 0.3 GPU
    assert "plot written to" in s.poolctl("reclamation-order", "--plot", str(png)).stdout


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
    fig, axes = plt.subplots(2, 2, figsize=(11, 6))
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
        ax.legend(fontsize="x-small")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "dashboard-panels.png", dpi=80)
    plt.close(fig)
