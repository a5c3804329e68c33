"""What every poolctl verb shares: `-o json|table`, one-line errors, tables."""

from __future__ import annotations

import json
import sys
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
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table",
                        help="json for machines, a readable table otherwise")


def emit(args: Any, document: Any, render_table: Callable[[Any], str]) -> None:
    text = json.dumps(document, indent=2) if args.output == "json" else render_table(document)
    print(text, flush=True)   # flushed: `watch` streams documents to a pipe as they come


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table."""
    cells = [[str(h) for h in headers]] + [[("—" if c is None else str(c)) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def fail(error: CtlError) -> NoReturn:
    print(f"poolctl: {error}", file=sys.stderr)
    raise SystemExit(error.exit_code)
