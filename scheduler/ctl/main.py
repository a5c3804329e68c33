"""poolctl: the operators' and tenants' command line. One module per verb group;
each registers its sub-commands and sets `run(args) -> exit code`."""

from __future__ import annotations

import argparse
import os
import sys

from scheduler.ctl import certs, claims, demo, ledger, ops, split
from scheduler.ctl.output import EXIT_USAGE, CtlError, fail

VERB_GROUPS = (split, claims, ops, ledger, certs, demo)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, like every other failure
        fail(CtlError("USAGE", message, EXIT_USAGE))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="poolctl", description="Pool's command line for operators and tenants. "
                     "Every command takes -o json.")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    for group in VERB_GROUPS:
        group.register(verbs)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        raise SystemExit(args.run(args))
    except CtlError as error:
        fail(error)
    except BrokenPipeError:  # `poolctl ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0) from None


if __name__ == "__main__":
    main()
