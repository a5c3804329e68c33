"""Operations: config, --check, capacity, sd_notify, metrics and the systemd unit."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from agent import capacity
from agent.config import Config, ConfigError, load
from agent.main import main
from agent.meters.base import GPU, DeviceInfo
from agent.metrics import AgentMetrics
from agent.windows import Window
from protos import daemon
from protos.energy import GapReason, Grade, Share

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "pool-agent.service"


def write(tmp_path, text):
    path = tmp_path / "agent.toml"
    path.write_text(text)
    return path


def test_config_every_key_parses(tmp_path):
    cfg = load(write(tmp_path, """
host_id = "gpu-17"
scheduler = "sched:7443"
window_ms = 2000
state_dir = "/tmp/pool"
log_level = "debug"
[meters]
nvml = false
rapl = true
rapl_root = "/tmp/powercap"
stall_ms = 700
[estimator]
gpu_watts = 350
cpu_watts = 120
[stream]
batch_max = 5
backoff_initial_ms = 100
backoff_max_ms = 1000
[stream.tls]
ca = "/etc/pool/ca.pem"
cert = "/etc/pool/gpu-17.pem"
key = "/etc/pool/gpu-17.key"
[spool]
max_windows = 10
[metrics]
listen = ":9464"
[capacity]
cpu_millis = 8000
memory_mb = 1024
disk_mb = 2048
gpu_mdev = 4000
gpu_types = ["NVIDIA H200"]
max_concurrency = 3
disk_path = "/var"
"""))
    assert cfg.window_ns == 2_000_000_000 and cfg.meters.rapl_root == Path("/tmp/powercap")
    assert cfg.spool.max_windows == 10
    assert cfg.capacity.overrides()["gpu_types"] == ("NVIDIA H200",) and cfg.estimator.gpu_watts == 350
    assert cfg.stream.tls.ca == Path("/etc/pool/ca.pem") and cfg.stream.tls.key == Path("/etc/pool/gpu-17.key")


@pytest.mark.parametrize("text, message", [
    ("window_ms = 50", "window_ms must be ≥ 100"),
    ("windowms = 1000", "windowms is not a known key"),
    ("[meters]\nnvml = 1", "meters.nvml must be bool"),
    ("[spool]\nmax_windows = 0", "spool.max_windows must be positive"),
    ("[stream]\ntls_ca = '/ca.pem'", "stream.tls_ca is not a known key"),   # replaced by [stream.tls] ca
    ("[capacity]\ngpu_types = [1]", "capacity.gpu_types[0] must be str"),
    ("meters = 3", "meters must be a table"),
    ("window_ms = ", "not valid TOML"),
])
def test_config_errors_name_the_key_and_the_reason(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load(write(tmp_path, text))


def test_overrides_win_and_missing_fields_are_measured():
    gpus = [DeviceInfo("GPU-1", GPU, "NVIDIA H200"), DeviceInfo("GPU-2", GPU, "NVIDIA H200")]
    fields = capacity.host_capacity(gpus, Config().capacity.overrides() | {"memory_mb": 64})
    assert fields["gpu_mdev"] == 2000 and fields["gpu_types"] == ["NVIDIA H200"]
    assert fields["cpu_millis"] >= 1000 and fields["memory_mb"] == 64 and fields["disk_mb"] > 0
    assert capacity.as_proto(fields).resources.gpu_mdev == 2000


def test_check_prints_each_device_meter_grade_and_why_not_better(tmp_path, capsys, kit, in_process):
    kit.make_zone(tmp_path / "pc", "intel-rapl:0", "package-0", 10)
    path = write(tmp_path, f'[meters]\nnvml = false\nrapl_root = "{tmp_path / "pc"}"\n')
    with pytest.raises(SystemExit) as done:
        main(["--check", "--config", str(path)])
    out = capsys.readouterr().out
    assert done.value.code == 0
    assert "cpu:0  cpu  meter RAPL  grade HwShunt" in out and "NVML: disabled" in out


def test_check_without_any_meter_says_why_and_fails(tmp_path, capsys, in_process):
    path = write(tmp_path, f'[meters]\nnvml = false\nrapl_root = "{tmp_path / "none"}"\n')
    with pytest.raises(SystemExit) as done:
        main(["--check", "--config", str(path)])
    out = capsys.readouterr().out
    assert done.value.code == 1 and "meter none" in out and "estimator: not configured" in out


def test_bad_window_on_the_command_line_is_refused(tmp_path, capsys, in_process):
    with pytest.raises(SystemExit) as done:
        main(["--replay", "bundled", "--stdout", "--window-ms", "10", "--config", str(write(tmp_path, ""))])
    assert done.value.code == 2 and "--window-ms must be ≥ 100" in capsys.readouterr().err


def test_sd_notify_sends_ready_and_watchdog(tmp_path, monkeypatch):
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    assert daemon.ready("metering 2 devices") and daemon.watchdog() and daemon.stopping()
    got = [sock.recv(256).decode() for _ in range(3)]
    assert got == ["READY=1\nSTATUS=metering 2 devices", "WATCHDOG=1", "STOPPING=1"]
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert daemon.ready() is False  # outside systemd: a no-op


def test_watchdog_interval_is_half_of_watchdog_sec(monkeypatch):
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    assert daemon.watchdog_interval_s() == 15.0
    monkeypatch.setenv("WATCHDOG_PID", "1")
    assert daemon.watchdog_interval_s() is None  # meant for another process


def test_signals_set_the_stop_event():
    import os
    import signal
    stop = threading.Event()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        daemon.stop_on_signals(stop)
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(2)
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_metrics_count_energy_by_grade_and_occupant():
    m = AgentMetrics()
    m.window(Window("GPU-1", 1, 0, 1, 900, Grade.HwShunt, 900,
                    shares=(Share("a", 600, Grade.ModelBased), Share("unallocated", 300, Grade.ModelBased))))
    m.window(Window("GPU-1", 2, 1, 500_000_001, None, Grade.HwShunt, None, gap="stalled",
                    reason=GapReason.MeterError))
    text = __import__("prometheus_client").generate_latest(m.registry).decode()
    assert 'pool_agent_device_energy_uj_total{device="GPU-1",grade="HwShunt"} 900.0' in text
    assert 'pool_agent_occupant_energy_uj_total{device="GPU-1",grade="ModelBased",occupant="a"} 600.0' in text
    assert 'pool_agent_gap_windows_total{device="GPU-1"} 1.0' in text
    assert 'pool_agent_unaccounted_seconds_total{device="GPU-1",reason="MeterError"} 0.5' in text
    assert "pool_agent_dropped" not in text   # the alarm that fired when nothing was lost is gone
    for name in ("pool_agent_window_lag_seconds", "pool_agent_buffered_windows"):
        assert name in text


def test_unit_is_hardened():
    service: dict[str, list[str]] = {}
    for line in UNIT.read_text().split("[Service]")[1].split("[Install]")[0].splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            service.setdefault(key, []).append(value)
    assert service["Type"] == ["notify"] and service["WatchdogSec"]
    assert service["DynamicUser"] == ["yes"] and "User" not in service
    assert service["CapabilityBoundingSet"] == ["CAP_DAC_READ_SEARCH"] == service["AmbientCapabilities"]
    assert service["DevicePolicy"] == ["closed"] and all("nvidia" in d for d in service["DeviceAllow"])
    assert service["ProtectSystem"] == ["strict"] and service["StateDirectory"] == ["pool-agent"]

