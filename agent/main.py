"""pool-agent: meter this host's devices and stream windows to the scheduler.

    pool-agent [--config /etc/pool/agent.toml] [--scheduler ADDR]
    pool-agent --check
    pool-agent --replay FILE [--replay-speed X] [--replay-origin-unix-ns T] [--replay-reload-at-ms M]
               [--window-ms N] --stdout
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import grpc

from agent import capacity
from agent.clock import MonotonicClock
from agent.config import CHECKS, DEFAULT_PATH, Config, ConfigError, load
from agent.meters import replay as replay_meter
from agent.meters.base import CPU_PACKAGE, Meter
from agent.meters.select import Choice, Selection, select
from agent.metrics import AgentMetrics
from agent.occupancy import Occupancy
from agent.sampler import Sampler
from agent.spool import FILE as SPOOL_FILE
from agent.spool import Spool, SpoolError
from agent.stream import Backoff, StreamClient
from agent.windows import Sequencer, Window, window_json
from protos import daemon
from protos.pool.v1 import agent_pb2, types_pb2

log = logging.getLogger("pool-agent")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pool-agent", description="Meter this host's GPUs and CPU packages and "
                                "stream graded energy windows to the Pool scheduler.")
    p.add_argument("--config", type=Path, default=DEFAULT_PATH, help=f"TOML configuration (default {DEFAULT_PATH})")
    p.add_argument("--scheduler", metavar="ADDR", help="scheduler host:port (overrides `scheduler`)")
    p.add_argument("--window-ms", type=int, help="window length in ms, ≥ 100 (overrides `window_ms`)")
    p.add_argument("--check", action="store_true", help="print each device, its meter and grade, then exit")
    p.add_argument("--replay", type=Path, metavar="FILE",
                   help="meter a recorded CSV trace instead of this host ('bundled' for the H200 trace)")
    p.add_argument("--replay-speed", type=float, default=1.0,
                   help="replay this many times faster than real time; 0 = as fast as possible")
    p.add_argument("--replay-origin-unix-ns", type=int, metavar="T",
                   help="play the trace's first row at this Unix time, in every process that replays it, so the "
                        "counter runs on while the agent is down (needs a real-time speed)")
    p.add_argument("--replay-reload-at-ms", type=int, metavar="M",
                   help="simulate a driver reload M ms after the trace's first row: the counter restarts from 0")
    p.add_argument("--stdout", action="store_true",
                   help="print one JSON object per window instead of streaming to a scheduler")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    return p


def configure(args) -> Config:
    config = load(args.config)
    cli = {"scheduler": args.scheduler, "window_ms": args.window_ms, "log_level": args.log_level}
    table = {k: v for k, v in cli.items() if v is not None}
    if "window_ms" in table:
        verdict = CHECKS["window_ms"](table["window_ms"])
        if verdict is not True:
            raise ConfigError(f"--window-ms {verdict}, got {table['window_ms']}")
    return replace(config, **table)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        config = configure(args)
        daemon.setup_logging(config.log_level)
        if args.check:
            raise SystemExit(check(config))
        raise SystemExit(run(args, config))
    except (ConfigError, replay_meter.TraceError) as exc:
        print(f"pool-agent: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except SpoolError as exc:
        print(f"pool-agent: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except BrokenPipeError:  # `pool-agent --stdout | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0) from None


def check(config: Config) -> int:
    selection = select(config, MonotonicClock())
    print(f"host {config.host}")
    for choice in selection.choices:
        meter = choice.meter
        kind = types_pb2.MeterKind.Name(meter.meter_kind) if meter else "none"
        grade = meter.grade.name if meter else "no figure"
        d = choice.device
        mig = "  MIG on (no per-instance energy: splits cover the whole GPU)" if d.mig_enabled else ""
        print(f"{d.device_id}  {d.device_type}  meter {kind}  grade {grade}{mig}")
        for why in choice.downgrades:
            print(f"    not better: {why}")
    for note in selection.host_notes:
        print(f"note: {note}")
    return 0 if selection.meters else 1


def run(args, config: Config) -> int:
    stop = threading.Event()
    daemon.stop_on_signals(stop)
    selection, clock, end_ns = _meters(args, config)
    if not selection.meters:
        log.error("no device can be metered; `pool-agent --check` says why")
        return 1
    metrics = AgentMetrics()
    for m in selection.meters:
        metrics.meter.labels(m.device.device_id, types_pb2.MeterKind.Name(m.meter_kind), m.grade.name).set(1)
        metrics.windows_refused.labels(m.device.device_id)   # 0 until one is: a series to alert on
    fields = capacity.host_capacity([c.device for c in selection.choices], config.capacity.overrides(),
                                     config.capacity.disk_path)
    occupancy = Occupancy({m.device.device_id: fields["cpu_millis"] for m in selection.meters
                           if m.device.kind == CPU_PACKAGE})
    client = None
    if args.stdout:
        spool = _stdout_spool(args, config, metrics)
    else:
        if not config.scheduler:
            log.error("no scheduler: set `scheduler` in %s or pass --scheduler (or --stdout)", args.config)
            return 2
        if config.metrics.listen:
            metrics.serve(config.metrics.listen)
        spool = Spool(_state_dir(config) / SPOOL_FILE, config.spool.max_windows, metrics)
        if len(spool):
            log.info("%d windows in the spool from before this start: sending them first", len(spool))
        client = _client(config, selection, fields, spool, metrics, occupancy)
        threading.Thread(target=client.run, name="stream", daemon=True).start()
    sampler: Sampler

    def sink(windows: list[Window]) -> None:
        windows = [occupancy.apply(w) for w in windows]
        for w in windows:
            metrics.window(w)
            if w.uj is None:
                log.info("%s: no figure from %d to %d (%s): %s", w.device_id, w.start_ns, w.end_ns,
                         w.reason.name if w.reason else "gap", w.gap)
        if spool is None:
            _print_windows([w.as_proto() for w in windows])
            return
        stored = spool.append(windows, sampler.lasts())
        if client is None and stored:   # --stdout: printed, then done with
            _print_windows(stored)
            spool.printed(stored[-1].seq)

    sampler = Sampler(selection.meters, clock, config.window_ns, Sequencer(), sink,
                      stall_ns=config.meters.stall_ms * 1_000_000, end_ns=end_ns, tick=_watchdog())
    if spool is not None:
        sampler.resume(spool.last_readings())
    daemon.ready(f"metering {len(selection.meters)} devices")
    try:
        sampler.run(stop)
    finally:
        daemon.stopping()
        if client is not None:
            _drain(spool, config.stream.drain_ms / 1000)
            client.close()
        if spool is not None:
            spool.close()
    return 0


def _stdout_spool(args, config: Config, metrics: AgentMetrics) -> Spool | None:
    """--stdout keeps the spool too (a restart continues every counter), except
    for a replay without an origin, which starts its trace afresh each time.
    Windows spooled but not printed before a crash are printed first."""
    if args.replay is not None and args.replay_origin_unix_ns is None:
        return None
    try:
        spool = Spool(_state_dir(config) / SPOOL_FILE, config.spool.max_windows, metrics)
    except (ConfigError, SpoolError) as exc:
        log.warning("%s: windows will not continue across restarts", exc)
        return None
    left = spool.unacknowledged()
    _print_windows(left)
    if left:
        spool.printed(left[-1].seq)
    return spool


def _meters(args, config: Config) -> tuple[Selection, object, int | None]:
    if args.replay is None:
        clock = MonotonicClock()
        return select(config, clock), clock, None
    path = replay_meter.bundled_trace() if str(args.replay) == "bundled" else args.replay
    reload_ns = None if args.replay_reload_at_ms is None else args.replay_reload_at_ms * 1_000_000
    if args.replay_origin_unix_ns is not None and args.replay_speed <= 0:
        raise ConfigError("--replay-origin-unix-ns needs a real-time --replay-speed (> 0)")
    try:
        meter = replay_meter.ReplayMeter(path, args.replay_speed, origin_unix_ns=args.replay_origin_unix_ns,
                                         reload_at_ns=reload_ns)
    except ValueError as exc:
        raise ConfigError(f"--replay: {exc}") from None
    return Selection([Choice(meter.device, meter)]), meter.clock, meter.end_ns


def _print_windows(windows: list[agent_pb2.Window]) -> None:
    for w in windows:
        sys.stdout.write(json.dumps(window_json(w)) + "\n")
    sys.stdout.flush()


def _state_dir(config: Config) -> Path:
    try:
        config.state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"state_dir {config.state_dir}: {exc.strerror}") from None
    return config.state_dir


def _device_meter(meter: Meter, downgrades: list[str]) -> types_pb2.DeviceMeter:
    d = meter.device
    return types_pb2.DeviceMeter(device_id=d.device_id, kind=d.kind, device_type=d.device_type,
                                 meter=meter.meter_kind, grade=int(meter.grade), memory_bytes=d.memory_bytes,
                                 mig_enabled=d.mig_enabled, downgrades=downgrades)


def _client(config, selection, fields, spool, metrics, occupancy) -> StreamClient:
    devices = [_device_meter(c.meter, c.downgrades) for c in selection.choices if c.meter is not None]

    def register() -> agent_pb2.RegisterRequest:
        return agent_pb2.RegisterRequest(host_id=config.host, capacity=capacity.as_proto(fields),
                                         devices=devices, agent_version=_version(), window_ns=config.window_ns)

    s = config.stream
    credentials = None
    if s.tls is not None:
        credentials = grpc.ssl_channel_credentials(
            _pem(s.tls.ca, "ca"), _pem(s.tls.key, "key") if s.tls.key else None,
            _pem(s.tls.cert, "cert") if s.tls.cert else None)
    return StreamClient(config.scheduler, register, spool, metrics,
                        on_occupancy=occupancy.update, batch_max=s.batch_max, credentials=credentials,
                        backoff=Backoff(s.backoff_initial_ms / 1000, s.backoff_max_ms / 1000),
                        refusals_before_gap=s.refusals_before_gap)


def _pem(path: Path, key: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"stream.tls.{key} {path}: {exc.strerror}") from None


def _version() -> str:
    try:
        return metadata.version("pool")
    except metadata.PackageNotFoundError:
        return "unknown"


def _watchdog():
    interval = daemon.watchdog_interval_s()
    last = [0.0]

    def tick() -> None:
        if interval is not None and time.monotonic() - last[0] >= interval:
            daemon.watchdog()
            last[0] = time.monotonic()
    return tick


def _drain(spool: Spool, seconds: float) -> None:
    """On stop, wait this long for the scheduler to acknowledge the last windows."""
    deadline = time.monotonic() + seconds
    while len(spool) and time.monotonic() < deadline:
        time.sleep(0.05)
    if len(spool):
        log.info("stopping with %d windows unacknowledged: they stay in the spool and are sent after the "
                 "next start", len(spool))


if __name__ == "__main__":
    main()
