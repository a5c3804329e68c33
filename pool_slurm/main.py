"""pool-slurm: the bridge between Slurm and Pool (docs/SLURM.md).

    pool-slurm run [--config PATH]         the bridge daemon (systemd/pool-slurm.service)
    pool-slurm job-submit-lua [--config]   print the job_submit.lua that holds governed GPU jobs
    pool-slurm                              as PrologSlurmctld / EpilogSlurmctld / TaskEpilog
                                            (SLURM_SCRIPT_CONTEXT)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# argparse, logging and importlib.resources are imported where used: as PrologSlurmctld,
# EpilogSlurmctld and TaskEpilog this module starts once per job while Slurm holds the job's nodes


def _lua_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def job_submit_lua(partitions, wake: Path | None = None) -> str:
    """job_submit.lua holding GPU jobs of `partitions`, touching `wake` for each (None: no touch)."""
    from importlib import resources
    template = (resources.files("pool_slurm") / "job_submit.lua").read_text()
    governed = ", ".join(f"[{_lua_string(p)}] = true" for p in partitions)
    return template.replace("@GOVERNED@", governed).replace("@WAKE@", _lua_string(str(wake)) if wake else "nil")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv and os.environ.get("SLURM_SCRIPT_CONTEXT"):
        from pool_slurm.hooks import main as hook
        return hook()
    import argparse
    parser = argparse.ArgumentParser(prog="pool-slurm", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("run", "job-submit-lua", "prolog", "epilog"))
    parser.add_argument("--config", type=Path, help="TOML configuration (default $POOL_SLURM_CONFIG or "
                                                    "/etc/pool/slurm.toml)")
    args = parser.parse_args(argv)
    from pool_slurm.config import ConfigError, load
    if args.command in ("prolog", "epilog"):
        os.environ["SLURM_SCRIPT_CONTEXT"] = f"{args.command}_slurmctld"
        from pool_slurm.hooks import main as hook
        return hook(args.config)
    try:
        config = load(args.config)
    except ConfigError as exc:
        print(f"pool-slurm: {exc}", file=sys.stderr)
        return 2
    if args.command == "job-submit-lua":
        sys.stdout.write(job_submit_lua(config.partitions, config.wake))
        return 0
    import logging
    import signal
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s pool-slurm %(levelname)s %(message)s")
    from pool_slurm.bridge import Bridge
    from pool_slurm.pool import Pool
    from pool_slurm.slurm import Slurm
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    pool = Pool(config)
    logging.getLogger("pool_slurm").info("governing partitions %s of %s for Pool at %s",
                                         ",".join(config.partitions), config.cluster, config.scheduler)
    from pool_slurm.gate import Finisher, Gate
    gate = Gate(config, pool)
    bridge = Bridge(config, Slurm(config.env()), pool)
    finisher = Finisher(config, bridge)
    import threading
    threading.Thread(target=bridge.follow, args=(lambda: bool(stopping),), name="watch", daemon=True).start()
    try:
        bridge.run(lambda: bool(stopping))
    finally:
        finisher.close()
        gate.close()
        pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
