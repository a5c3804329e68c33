"""The admission kernel's cost in CPU instructions, which do not depend on
what else the host is doing: bench/kernel.py's 1x pass (5,000 new claims on
about 8,850 open ones, 1,000 workers), counted by valgrind's callgrind, per
decision, beside the full-recompute peer counted the same way. With
`--against REF ...` the same pass on the kernel of each git revision, for
judging a change: on this shared host wall-clock runs swing 1.5-2x for minutes, and
instruction counts repeat to within 0.5 %.

Each tree builds the cluster natively (bench/kernel.build) and pickles it;
a child under callgrind loads it with counting off and counts only inside
functools.reduce, the marker the pass runs under.

    .venv/bin/python bench/instructions.py [--no-peer] [--against REF ...]

`--no-peer` leaves the full-recompute peer out (it is the slowest count, and
the ratio against another revision does not need it).
"""

from __future__ import annotations

import argparse
import copyreg
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import types
from functools import reduce
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEER_DECISIONS = 2


def _proxy(items: dict) -> types.MappingProxyType:
    return types.MappingProxyType(items)


# the tenant tree holds read-only views, which pickle does not know
copyreg.pickle(types.MappingProxyType, lambda view: (_proxy, (dict(view),)))


def dump(path: str) -> None:
    """Build bench/kernel's 1x cluster with its new claims queued, natively."""
    sys.path.insert(0, str(ROOT / "bench"))
    import kernel
    queued = kernel.build(*kernel.SIZES["1x"][:3])[1]
    with open(path, "wb") as out:
        pickle.dump(queued, out, protocol=5)


def count(path: str, peer: bool) -> None:
    """Under callgrind: load the state (not counted), then one pass or the
    peer's decisions inside reduce (counted); print how many decisions."""
    sys.path.insert(0, str(ROOT / "bench"))
    from kernel import naive_decide, tune_collector

    from scheduler.kernel import schedule
    with open(path, "rb") as source:
        queued = pickle.load(source)
    tune_collector()
    if peer:
        reduce(lambda _, __: naive_decide(queued, PEER_DECISIONS, 2), range(1), None)
        print(PEER_DECISIONS)
    else:
        print(len(reduce(lambda _, __: schedule(queued, 2), range(1), None).reasons))


def per_decision(tree: Path, peer: bool, scratch: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    state = os.path.join(scratch, f"state-{tree.name}.pickle")
    if not os.path.exists(state):
        subprocess.run([sys.executable, __file__, "--dump", state], env=env, check=True)
    return per_unit([__file__, "--count", state] + (["--peer"] if peer else []), env)


def per_unit(script: list[str], env: dict[str, str]) -> float:
    """Run `script` under callgrind, counting only inside functools.reduce:
    the instructions collected, per unit (the last number the script prints)."""
    run = subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=functools_reduce",
                          "--callgrind-out-file=/dev/null", sys.executable, *script],
                         env=env, capture_output=True, text=True, check=True)
    collected = int(re.search(r"Collected : (\d+)", run.stderr).group(1))
    return collected / int(run.stdout.split()[-1])


def checkout(ref: str, into: str) -> Path:
    """The tree of git revision `ref`, unpacked under `into`."""
    tree = Path(into) / f"against-{ref}"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", metavar="REF", nargs="+", default=[],
                        help="also count the kernel of these git revisions")
    parser.add_argument("--dump", metavar="FILE", help=argparse.SUPPRESS)
    parser.add_argument("--count", metavar="FILE", help=argparse.SUPPRESS)
    parser.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-peer", action="store_true", help="do not count the full-recompute peer")
    args = parser.parse_args()
    if args.dump:
        return dump(args.dump)
    if args.count:
        return count(args.count, args.peer)
    if shutil.which("valgrind") is None:
        sys.exit("bench/instructions.py needs valgrind (Debian package valgrind)")
    with tempfile.TemporaryDirectory() as scratch:
        mine = per_decision(ROOT, False, scratch)
        if args.no_peer:
            print(f"1x pass, instructions per decision: {mine:>12,.0f}")
        else:
            peer = per_decision(ROOT, True, scratch)
            print(f"1x pass, instructions per decision: {mine:>12,.0f}   full-recompute peer {peer:>14,.0f}  "
                  f"{peer / mine:,.0f}x fewer")
        for ref in args.against:
            theirs = per_decision(checkout(ref, scratch), False, scratch)
            print(f"  the same pass at {ref:<10} {theirs:>12,.0f}   this tree uses {mine / theirs:.3f}x")


if __name__ == "__main__":
    main()
