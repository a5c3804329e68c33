"""`poolctl dashboard`: print the Grafana dashboard shipped with Pool (package
data, scheduler/ctl/grafana/pool.json) for import into Grafana. Its panels read
the scheduler's and agents' Prometheus metrics (docs/OPERATIONS.md)."""

from __future__ import annotations

import argparse
import json
from importlib import resources
from typing import Any

from scheduler.ctl.output import add_output_flag


def dashboard() -> dict:
    return json.loads(resources.files("scheduler.ctl").joinpath("grafana/pool.json").read_text())


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("dashboard", help="print the Grafana dashboard (JSON) over Pool's metrics")
    add_output_flag(p)   # accepted for uniformity: the dashboard is JSON either way
    p.set_defaults(run=run)


def run(args: Any) -> int:
    print(json.dumps(dashboard(), indent=2), flush=True)
    return 0
