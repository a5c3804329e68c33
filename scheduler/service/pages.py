"""Answers a page at a time (List, Splits, Workers, PreemptionOrder,
ReclamationOrder), so that no answer grows with the cluster past the message
size limit: `page_size` items at most, and an opaque `next_page_token` to
ask for the rest. An answer that is one list of rows with no page (Explain's
worker rows) is capped instead, and says how many it left out
(kernel.explain's `max_workers`)."""

from __future__ import annotations

from scheduler.service.config import Limits
from scheduler.service.errors import Refused


def page_size(requested: int, limits: Limits, default: int = 0) -> int:
    """The page size to serve: `default` (else limits.page_size) for 0; INVALID_ARGUMENT
    above the greater of limits.max_page_size and `default`."""
    default = default or limits.page_size
    most = max(limits.max_page_size, default)
    if requested > most:
        raise Refused("INVALID_ARGUMENT", f"page_size: at most {most}")
    return requested or default


def positions(token: str, n: int) -> tuple[int, ...]:
    """The `n` positions a token of `next_positions` names (zeros for the first page)."""
    if not token:
        return (0,) * n
    parts = token.split(".")
    if len(parts) != n or not all(p.isascii() and p.isdigit() and len(p) <= 20 for p in parts):
        raise Refused("INVALID_ARGUMENT", "page_token: not a token this server gave")
    return tuple(map(int, parts))


def next_positions(at: tuple[int, ...], more: bool) -> str:
    """The token for a next page starting at the positions `at` ("" when there is none)."""
    return ".".join(map(str, at)) if more else ""


def slices(token: str, lists: tuple, size: int) -> tuple[list[list], str]:
    """A page of each of `lists` (sequences in one order each), from the positions the
    token names: at most `size` items of each, and the token for the rest."""
    starts = positions(token, len(lists))
    ends = [min(len(items), start + size) for items, start in zip(lists, starts)]
    page = [list(items[start:end]) for items, start, end in zip(lists, starts, ends)]
    return page, next_positions(tuple(ends), any(end < len(items) for items, end in zip(lists, ends)))

