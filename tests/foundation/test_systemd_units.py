"""Every unit file passes `systemd-analyze verify` (CI installs systemd)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "systemd"


@pytest.mark.parametrize("name", ["pool-agent", "pool-scheduler", "pool-slurm"])
def test_unit_passes_systemd_analyze_verify(tmp_path, name):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed here (CI installs systemd)")
    text = (UNITS / f"{name}.service").read_text()
    installed = re.search(r"^ExecStart=(\S+)", text, re.M).group(1)
    assert installed.endswith(f"/{name}")
    unit = tmp_path / f"{name}.service"  # ExecStart must exist for verify: point it at this venv's script
    unit.write_text(text.replace(installed, str(Path(sys.executable).with_name(name))))
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"{name}.service" not in done.stderr, done.stderr


def test_the_scheduler_unit_bounds_what_input_can_make_it_use():
    """Issue 12: files (idle connections locked out health checks at 1,024), memory and
    tasks bounded; exit 2 (a person must act) is not restarted in a loop."""
    directives = dict(line.split("=", 1) for line in (UNITS / "pool-scheduler.service").read_text().splitlines()
                      if "=" in line and not line.startswith("#"))
    assert int(directives["LimitNOFILE"]) >= 65536
    assert directives["MemoryMax"] and directives["TasksMax"]
    assert "2" in directives["RestartPreventExitStatus"].split()
