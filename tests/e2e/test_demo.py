"""The README's main job: `poolctl demo` plays its scenario against the real
daemons and reports outcomes that come from the running system."""

import json
import subprocess

from .conftest import BIN


def test_demo_scenario_outcomes():
    done = subprocess.run([str(BIN / "poolctl"), "demo", "-o", "json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["mode"] == "replay"
    estimate = report["estimate"]
    assert estimate["grade"] == "ModelBased" and estimate["estimate_uj"] > 0 and estimate["eligible"] == 2
    assert report["gang"] == {"train-0": "ADMITTED", "train-1": "ADMITTED"}
    refused = report["cross_tenant"]   # adhoc's certificate releasing training's claim
    assert (refused["status"], refused["code"], refused["receipts_added"]) == ("PERMISSION_DENIED", "OUT_OF_SCOPE", 0)
    assert report["borrow"] == {c: {"state": "ADMITTED", "borrowed": True} for c in ("r-1", "r-2")}
    assert report["estimator"] == {"state": "PENDING", "reason": "ESTIMATOR_MAY_NOT_BORROW"}
    # r-2 did 2 units for the energy r-1 spent on 10: the worse cost per unit goes, and only it
    assert report["preemption"] == {"t-urgent": "ADMITTED", "r-1": "ADMITTED", "r-2": "PREEMPTED"}
    assert report["idle"]["verdicts_seen"][-1] == "IDLE" and report["idle"]["reclaimed"] == ["nb-1"]
    assert {"research", "training"} <= set(report["splits"])
    assert all(v["uj"] > 0 for v in report["splits"].values())
    ledger = report["ledger"]
    assert ledger["valid"] and ledger["signatures_ok"] and ledger["chain_ok"]
    assert ledger["grade"] == "witnessed" and ledger["witnessed_length"] == ledger["length"] - 1
