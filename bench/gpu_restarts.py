"""The issue's "On a real GPU" check, prepared for a host with an NVIDIA GPU
(not run in this repository's CI, which has none):

    .venv/bin/python bench/gpu_restarts.py [--out DIR]

`pool-agent --check`, then `pool-agent --stdout` for ~60 s while a load runs
(bf16 8192² matmuls for 20 s, idle, then a process that only holds memory),
SIGKILLed and restarted twice in the middle. Prints the windows' sum beside
the counter's delta read directly (nvmlDeviceGetTotalEnergyConsumption) before
and after, the unaccounted time, and writes the raw windows to DIR.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pynvml

BIN = Path(sys.executable).parent
LOAD = """
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 20
while time.time() < end:
    (a @ a).sum().item()
del a; torch.cuda.empty_cache(); time.sleep(10)
held = torch.empty(40 * 2**30, dtype=torch.uint8, device="cuda"); time.sleep(20)
"""


def counter_mj(handle) -> tuple[int, int]:
    return time.time_ns(), pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        print(f"gpu_restarts: skipped, no NVIDIA GPU here ({exc})")   # `make bench` on a host without one
        return
    print(subprocess.run([str(BIN / "pool-agent"), "--check"], capture_output=True, text=True).stdout)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    uuid = pynvml.nvmlDeviceGetUUID(handle)
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    state = Path(tempfile.mkdtemp())
    config = state / "agent.toml"
    config.write_text(f'state_dir = "{state}"\n[meters]\nrapl = false\n')
    windows_file = out / "gpu-restarts-windows.jsonl"
    before = counter_mj(handle)
    load = subprocess.Popen([sys.executable, "-c", LOAD])
    with open(windows_file, "w") as sink:
        for life, seconds in enumerate((15, 20, 25)):   # killed at ~15 s and ~37 s, stopped at ~64 s
            agent = subprocess.Popen([str(BIN / "pool-agent"), "--config", str(config), "--stdout"], stdout=sink)
            time.sleep(seconds)
            agent.send_signal(signal.SIGKILL if life < 2 else signal.SIGTERM)
            agent.wait(timeout=30)
            if life < 2:
                time.sleep(2)
    after = counter_mj(handle)
    load.wait(timeout=120)
    windows = [w for line in windows_file.read_text().splitlines() if (w := json.loads(line))["device"] == uuid]
    holes = sum(1 for a, b in zip(windows, windows[1:]) if b["start_ns"] != a["end_ns"])
    gaps = [w for w in windows if w["uj"] is None]
    measured = sum(w["uj"] for w in windows if w["uj"] is not None)
    direct = (after[1] - before[1]) * 1000
    edges_s = ((windows[0]["start_ns"] - before[0]) + (after[0] - windows[-1]["end_ns"])) / 1e9
    print(f"windows {len(windows)}  holes or overlaps {holes}  gaps {len(gaps)} "
          f"({sum(w['end_ns'] - w['start_ns'] for w in gaps) / 1e9:.3f} s unaccounted)")
    print(f"windows' sum {measured} µJ  direct counter delta {direct} µJ  difference {direct - measured} µJ "
          f"over {edges_s:.3f} s outside the windows (before the first reading, after the last)")
    print(f"raw windows: {windows_file}")


if __name__ == "__main__":
    main()
