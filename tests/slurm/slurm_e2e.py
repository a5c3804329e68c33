"""The e2e harness (tests/e2e/conftest.py) and the test cluster (cluster.py),
each loaded by path under a name of its own: test modules import them from
here, never `from conftest import ...` (with the whole suite collected,
`conftest` may name another directory's)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).parent


def _load(name: str, path: Path):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


e2e = _load("pool_e2e_conftest", HERE.parent / "e2e" / "conftest.py")
slurm_cluster = _load("pool_slurm_test_cluster", HERE / "cluster.py")
wait_for = e2e.wait_for
