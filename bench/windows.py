"""Where a batch of windows spends the scheduler's CPU, stage by stage, beside
the raw ledger append of the same batch (issue 13's window ingest target),
in one process and one run, in CPU time.

A fake host like bench/e2e's (8 GPUs, every device idle: `unallocated` takes
each window whole) sends 1,000-window batches; each stage of
AgentService.Stream's per-batch path is timed in-process on the event loop's
thread, best of --rounds (the host is shared: the best round is the one least
disturbed), and printed per batch and as a share of the raw append's own
event-loop stage (steward.prepare: det-CBOR normalize) and of the whole raw
append (prepare + sign + store, as bench/e2e's peer does it). The ingest's
sign and store are the raw append's own (the same body), so the last line,
raw append CPU / ingest CPU, is what bench/e2e's ratio would be if gRPC cost
nothing:

  parse            AgentMessage.FromString (gRPC's deserializer)
  columns          batch_columns: protobuf messages -> the body's columns
  rules            agents._checked: the evidence rules (evidence.py)
  body             window_body.prepared: normal form and size, from the columns
  fold             Observed.fold and the kernel's Metered
  sign             receipts.make: the core encoded and signed (the ledger's thread)

    .venv/bin/python bench/windows.py [--claims N] [--rounds R]

`--claims N` first admits N CPU-only claims on the host (bench/e2e's
SubmitMany phase leaves thousands open on its hosts before its window phase).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e2e   # noqa: E402  (bench/e2e.py: the fake host and its batches)
from ledger import line   # noqa: E402  (bench/ledger.py: the figure format)

from protos.pool.v1 import agent_pb2   # noqa: E402
from scheduler import kernel   # noqa: E402
from scheduler.kernel import ClaimSpec, Resources, WorkerRegistered   # noqa: E402
from scheduler.ledger import keys, receipts   # noqa: E402
from scheduler.ledger.sqlite import SqliteStore   # noqa: E402
from scheduler.ledger.steward import Steward, prepare   # noqa: E402
from scheduler.ledger.writer import GroupCommitWriter   # noqa: E402
from scheduler.service import config as configuration, convert   # noqa: E402
from scheduler.service.windows import window_body   # noqa: E402
from scheduler.service.windows.batch import WINDOWS, batch_columns, windows_body   # noqa: E402
from scheduler.service.agents import AgentServicer   # noqa: E402
from scheduler.service.engine import Engine   # noqa: E402
from scheduler.service.metrics import SchedulerMetrics   # noqa: E402

BATCH, BATCHES = 1_000, 20


def best(rounds: int, stage: Callable[[int], object]) -> float:
    """CPU seconds per batch (this process's, so the time it waits for the
    disk or for the CPU is not counted): the best of `rounds` rounds of
    BATCHES calls."""
    times = []
    for _ in range(rounds):
        start = time.process_time()
        for i in range(BATCHES):
            stage(i)
        times.append((time.process_time() - start) / BATCHES)
    return min(times)


async def measure(workdir: Path, claims: int, rounds: int) -> dict[str, float]:
    (workdir / "scheduler.toml").write_text(e2e._config(workdir, "127.0.0.1:1", None))
    config = configuration.load(workdir / "scheduler.toml")
    engine = Engine(config.splits_retention)
    steward = Steward.open(SqliteStore(workdir / "ledger.sqlite", create=True), keys.generate(),
                           engine.ledger_fold())
    engine.start(GroupCommitWriter(steward))
    engine.ready = True
    agents = AgentServicer(engine, config, SchedulerMetrics())
    host, registration = "bench-0", e2e.registration("bench-0")
    agents.meters[host] = list(registration.devices)
    await engine.decide([config.config_event(), WorkerRegistered(convert.worker_from(registration, None))],
                        time.time_ns())
    await agents._set_live(host, True)
    for i in range(claims):
        await engine.decide(lambda latest: [kernel.submit(latest.kernel, ClaimSpec(f"c{i}", e2e.TENANTS[0],
                                                                    Resources(cpu_millis=1), estimate_uj=1))],
                            time.time_ns())
    agents._opened[host] = time.time_ns()
    raw = e2e._batch(host, 1, BATCH, time.time_ns() - 86_400 * 10**9)
    fresh = [agent_pb2.AgentMessage.FromString(raw).batch for _ in range(rounds * BATCHES)]
    windows, versions, mean_uw = batch_columns(fresh[0])
    body = windows_body(host, windows)
    item = window_body.prepared(body, time.time_ns(), "bench", wire=True)
    key = keys.generate()
    taken = iter(fresh)   # columns are read from messages never read before, as a stream's are
    stages = {
        "parse": best(rounds, lambda i: agent_pb2.AgentMessage.FromString(raw)),
        "columns": best(rounds, lambda i: batch_columns(next(taken))),
        "rules": best(rounds, lambda i: agents._checked(host, windows, versions, mean_uw, True, engine.read().service)),
        "body": best(rounds, lambda i: window_body.prepared(body, 1, "bench", wire=True)),
        "fold": best(rounds, lambda i: engine.observed.fold(engine.read().state, host, windows, 1)),
        "sign": best(rounds, lambda i: receipts.make(key, 1, bytes(32), 1, WINDOWS, item.body, "bench")),
        "peer prepare": best(rounds, lambda i: prepare(WINDOWS, body, 1)),
        "peer append": best(rounds, lambda i: steward.append(WINDOWS, body, 1)),   # prepare + sign + store, in CPU
    }
    await engine.writer.close()
    steward.close()
    return stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--claims", type=int, default=0, help="CPU-only claims open on the host first")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per stage; each figure is the best")
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}   load average: {os.getloadavg()[0]:.2f}   "
          f"command: {shlex.join([sys.executable, *sys.argv])}")
    print(f"CPU per batch of {BATCH:,} windows; ratios: a stage's CPU / the raw append's (steward.append)")
    with tempfile.TemporaryDirectory(prefix="pool-bench-windows-") as tmp:
        s = asyncio.run(measure(Path(tmp), args.claims, args.rounds))
    prepare_s, append_s = s["peer prepare"], s["peer append"]
    for name in ("parse", "columns", "rules", "body", "fold", "sign"):
        line(f"  {name}", f"{s[name] * 1e3:.3f} ms", "of the raw append's CPU", s[name] / append_s)
    loop = sum(s[name] for name in ("parse", "columns", "rules", "body", "fold"))
    line("ingest on the event loop (parse .. fold)", f"{loop * 1e3:.3f} ms", f"raw prepare {prepare_s * 1e3:.3f} ms",
         loop / prepare_s)
    # the ingest's sign and store are the raw append's own (the same body): all of it but its prepare
    ingest = loop + append_s - prepare_s
    line("ingest, CPU per batch (+ sign and store)", f"{ingest * 1e3:.3f} ms", f"raw append {append_s * 1e3:.3f} ms")
    line("  raw append CPU / ingest CPU", f"{append_s / ingest:.1%}", ">= 75% (less gRPC's own cost)",
         append_s / ingest)

if __name__ == "__main__":
    main()
