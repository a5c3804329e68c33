"""What every poolctl verb shares: `-o json|table` (accepted anywhere on the
command line), one-line errors, tables, and the argument types that turn a
figure the wire cannot carry into a usage error instead of a traceback."""

from __future__ import annotations

import argparse
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


CUSTOM = "custom-columns="


def _output_format(text: str) -> str:
    if text in ("table", "json", "wide") or (text.startswith(CUSTOM) and len(text) > len(CUSTOM)):
        return text
    raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (table, json, wide or custom-columns=SPEC)")


def add_output_flag(parser: Any) -> None:
    """-o on every parser, the top level's included; SUPPRESS keeps a parser
    that did not see it from overwriting the one that did (`output` reads it)."""
    parser.add_argument("-o", "--output", type=_output_format, default=argparse.SUPPRESS, metavar="FORMAT",
                        help="json for machines; table (default) for people; the claims table also takes wide "
                             "(every column) and custom-columns=HEADER:COLUMN,... (kubectl's syntax; a COLUMN "
                             "is a column's name or a JSON path such as .request.resources.gpu_mdev); "
                             "elsewhere these are the table")


def output(args: Any) -> str:
    """json or table (wide and custom-columns are tables)."""
    return "json" if layout(args) == "json" else "table"


def layout(args: Any) -> str:
    """The -o value as given: table, json, wide or custom-columns=SPEC."""
    return getattr(args, "output", "table")


def emit(args: Any, document: Any, render_table: Callable[[Any], str]) -> None:
    if output(args) == "json":
        import json   # here, not at the top: a table (the usual answer) needs none
        text = json.dumps(document, indent=2)
    else:
        text = render_table(document)
    print(text, flush=True)   # flushed: `watch` streams documents to a pipe as they come


def emit_line(args: Any, document: Any, render_line: Callable[[Any], str]) -> None:
    """One line per document: JSON Lines with -o json (for a stream such as watch)."""
    if output(args) == "json":
        import json
        text = json.dumps(document, separators=(",", ":"))
    else:
        text = render_line(document)
    print(text, flush=True)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], headed: bool = True) -> str:
    """A plain aligned text table: every column named, no trailing spaces
    (headed=False: the rows alone, as --no-headers prints them)."""
    cells = [[("—" if c is None or c == "" else str(c)) for c in r] for r in rows]
    return "\n".join(fitted([str(h) for h in headers], cells, headed)[0])


def fitted(headers: list[str], cells: list[list[str]], headed: bool = True) -> tuple[list[str], list[int]]:
    """The lines of a table of text cells (the header and a rule first when
    `headed`), and the widths it fitted, for rows printed later (a --watch)."""
    columns = list(zip(*cells)) if cells else [()] * len(headers)
    widths = [max(len(h), *map(len, column)) if column else len(h) for h, column in zip(headers, columns)]
    layout = _layout(widths)
    lines = [layout(*row).rstrip() for row in cells]   # one format call per row: 10,000 rows in ~0.1 s
    if headed:
        lines[:0] = [layout(*headers).rstrip(), "  ".join("-" * w for w in widths)]
    return lines, widths


def _layout(widths: Sequence[int]) -> Callable[..., str]:
    """A row's cells, each padded to its column's width, two spaces apart."""
    return "  ".join(f"{{:{w}}}" for w in widths).format


def row_line(cells: Sequence[str], widths: Sequence[int]) -> str:
    return _layout(widths)(*cells).rstrip()


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


def utc_s(ns: int) -> str:
    """A Unix-ns time as ISO 8601 UTC to the second, as sacct prints times (tables)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 1_000_000_000))


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


_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def moment(text: str) -> int:
    """A time for --since/--until, as Unix ns: `now`, a span ago (90s, 15m,
    2h, 3d), or an ISO 8601 date or UTC time (2026-12-01, 2026-12-01T10:30,
    2026-12-01T10:30:00Z)."""
    from datetime import datetime, timezone
    word = text.strip()
    if word == "now":
        return now_ns()
    if len(word) > 1 and word[-1] in _UNITS_S and word[:-1].isascii() and word[:-1].isdigit():
        return now_ns() - int(word[:-1]) * _UNITS_S[word[-1]] * 1_000_000_000
    try:
        when = datetime.fromisoformat(word.removesuffix("Z"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not now, a span ago (90s, 15m, 2h, 3d) or an ISO 8601 "
                                         "time (2026-12-01T10:30)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000
