"""tests/e2e's real processes (a pool-scheduler over mutual TLS, agents,
poolctl) for the client library's tests: its fixtures, re-exported."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
from e2e.conftest import cluster, harness  # noqa: E402,F401  (fixtures)
