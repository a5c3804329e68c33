"""What every poolctl verb shares: `-o json|table` (accepted anywhere on the
command line), one-line errors, tables, and the argument types that turn a
figure the wire cannot carry into a usage error instead of a traceback."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

EXIT_OK = 0
EXIT_FAILED = 1   # the command ran and the answer is "no" (e.g. an invalid ledger)
EXIT_USAGE = 2    # unusable arguments or input


class CtlError(Exception):
    """A failure to report as one line on stderr: `poolctl: CODE: message`."""

    def __init__(self, code: str, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.exit_code = exit_code


def add_output_flag(parser: Any) -> None:
    """-o on every parser, the top level's included; SUPPRESS keeps a parser
    that did not see it from overwriting the one that did (`output` reads it)."""
    parser.add_argument("-o", "--output", choices=("table", "json"), default=argparse.SUPPRESS,
                        help="json for machines, a readable table otherwise (default)")


def output(args: Any) -> str:
    return getattr(args, "output", "table")


def emit(args: Any, document: Any, render_table: Callable[[Any], str]) -> None:
    text = json.dumps(document, indent=2) if output(args) == "json" else render_table(document)
    print(text, flush=True)   # flushed: `watch` streams documents to a pipe as they come


def emit_line(args: Any, document: Any, render_line: Callable[[Any], str]) -> None:
    """One line per document: JSON Lines with -o json (for a stream such as watch)."""
    text = json.dumps(document, separators=(",", ":")) if output(args) == "json" else render_line(document)
    print(text, flush=True)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table: every column named, no trailing spaces."""
    cells = [[str(h) for h in headers]] + [[("—" if c is None or c == "" else str(c)) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def yes_no(value: bool) -> str:
    """How every table says a boolean."""
    return "yes" if value else "no"


def duration(ns: int | None) -> str:
    """A span as kubectl prints ages: 45s, 12m, 3h, 2d."""
    if ns is None or ns < 0:
        return "—"
    seconds = ns // 1_000_000_000
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:   # below two of a unit, the next smaller one: 90s, 119m
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def now_ns() -> int:
    return time.time_ns()


def utc(ns: int) -> str:
    """A Unix-ns time as ISO 8601 UTC, to the millisecond."""
    seconds, rest = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{rest // 1_000_000:03d}Z"


def _bounded(name: str, low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is outside {name} ({low} to {high})")
        return value
    parse.__name__ = name   # argparse names the type in its message
    return parse


uint64 = _bounded("uint64", 0, 2 ** 64 - 1)
uint32 = _bounded("uint32", 0, 2 ** 32 - 1)
int32 = _bounded("int32", -(2 ** 31), 2 ** 31 - 1)


def fail(error: CtlError) -> NoReturn:
    print(f"poolctl: {error}", file=sys.stderr)
    raise SystemExit(error.exit_code)
