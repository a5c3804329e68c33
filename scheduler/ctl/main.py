"""poolctl: the operators' and tenants' command line. One module per verb group;
each registers its sub-commands and sets `run(args) -> exit code`."""

from __future__ import annotations

import argparse
import os
import sys

from scheduler.ctl import certs, claims, dashboard, demo, ledger, ops, split
from scheduler.ctl.output import EXIT_FAILED, EXIT_USAGE, CtlError, add_output_flag, fail

VERB_GROUPS = (split, claims, ops, ledger, certs, dashboard, demo)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, like every other failure
        fail(CtlError("USAGE", message, EXIT_USAGE))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="poolctl", description="Pool's command line for operators and tenants. "
                     "Every command takes -o json, anywhere on the line.")
    add_output_flag(parser)
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    for group in VERB_GROUPS:
        group.register(verbs)
    return parser


def hoist_output(argv: list[str]) -> list[str]:
    """`-o json` is accepted anywhere (`poolctl -o json claims`, `poolctl ledger
    -o json verify F`): every -o/--output is moved behind the verb's own
    arguments, where the innermost parser reads it."""
    rest, flags, i = [], [], 0
    while i < len(argv):
        word = argv[i]
        if word == "--":   # what follows is the verb's, -o or not: the flags go before it
            break
        if word in ("-o", "--output") and i + 1 < len(argv):
            flags += argv[i:i + 2]
            i += 2
            continue
        if word.startswith("--output=") or (word.startswith("-o") and len(word) > 2 and not word.startswith("--")):
            flags.append(word)
        else:
            rest.append(word)
        i += 1
    return rest + flags + argv[i:]


def main(argv: list[str] | None = None) -> None:
    try:
        args = build_parser().parse_args(hoist_output(sys.argv[1:] if argv is None else argv))
        raise SystemExit(args.run(args))
    except CtlError as error:
        fail(error)
    except BrokenPipeError:  # `poolctl ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except Exception as error:  # noqa: BLE001 - the last resort: one line, never a traceback
        fail(CtlError("INTERNAL", f"{type(error).__name__}: {error}", EXIT_FAILED))


if __name__ == "__main__":
    main()
