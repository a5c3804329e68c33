"""A checkpoint's large parts, encoded as the state changes rather than whole
each time.

A checkpoint holds every claim (kernel/checkpoint.py) and, per claim, the
receipt that last changed it and who submitted and released it
(state.snapshot): four collections as large as the claims, while a state
changes only the entries its events touch and shares the rest. So each is
kept as det-CBOR items in checkpoint order (claims by id; a map's entries in
canonical key order), beside the map they were made from; the next
checkpoint finds what changed by walking only the nodes the two maps do not
share (fast/pmap.changes), re-encodes those entries, and splices the rest
(dcbor.Raw). A checkpoint then costs the event loop what changed since the
last one and a join, not an encoding of every claim: with one tenant's
50,000 claims the whole encoding took about a second, every time
(docs/BENCHMARKS.md "Abuse soak"). The bytes are exactly the plain encoding's
(tests/service/test_encoded.py).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from scheduler.kernel import ClusterState
from scheduler.kernel.codec import encode_compact
from scheduler.kernel.fast.pmap import MISSING, PMap, changes
from scheduler.ledger import dcbor


class EncodedEntries:
    """One id-keyed map's entries as det-CBOR items in `order`, kept between
    calls. `item(key, value)` is an entry's encoding."""

    def __init__(self, item: Callable[[Any, Any], bytes], order: Callable[[Any], Any]) -> None:
        self._item, self._order = item, order
        self._map = PMap()             # the map the items were made from
        self._places: list = []        # each entry's order, ascending
        self._items: list[bytes] = []  # each entry's encoding, in that order
        self._by_key: dict[Any, bytes] = {}

    def update(self, new: PMap) -> list[bytes]:
        """The items of `new`, in order."""
        changed = changes(self._map, new)
        by_key, item, order = self._by_key, self._item, self._order
        if len(changed) > 64 + len(self._items) // 8:   # many: sort them all again
            for key, _, value in changed:
                if value is MISSING:
                    del by_key[key]
                else:
                    by_key[key] = item(key, value)
            keys = sorted(by_key, key=order)
            self._places, self._items = [order(k) for k in keys], [by_key[k] for k in keys]
        else:
            places, items = self._places, self._items
            for key, before, value in changed:
                place = order(key)
                at = bisect_left(places, place)
                if value is MISSING:
                    del places[at], items[at], by_key[key]
                    continue
                data = by_key[key] = item(key, value)
                if before is MISSING:
                    places.insert(at, place)
                    items.insert(at, data)
                else:
                    items[at] = data
        self._map = new
        return self._items


def _claim(claim_id: str, claim: Any) -> bytes:
    return dcbor.encode(encode_compact(claim))


def _pair(key: str, value: Any) -> bytes:
    """A map entry's key and value encodings: those of the two-item array
    [key, value] after its one-byte head (0x82), in one encoder call."""
    return dcbor.encode([key, value])[1:]


class EncodedClaims:
    """The state's claims in id order, as checkpoint.claims_body encodes them
    (a claims callable for checkpoint.snapshot)."""

    def __init__(self) -> None:
        self._entries = EncodedEntries(_claim, lambda claim_id: claim_id)

    def __call__(self, state: ClusterState) -> dcbor.Raw:
        return dcbor.array(self._entries.update(state.claims))


class EncodedMap:
    """An id-keyed map of the service's state as `dict(sorted(map.items()))`
    encodes it."""

    def __init__(self) -> None:
        self._entries = EncodedEntries(_pair, dcbor.key_order)

    def __call__(self, entries: PMap) -> dcbor.Raw:
        items = self._entries.update(entries)
        return dcbor.mapping(len(items), b"".join(items))


class Encoded:
    """What state.snapshot keeps between checkpoints: the claims, and each
    per-claim map by its name."""

    def __init__(self) -> None:
        self.claims = EncodedClaims()
        self._maps: dict[str, EncodedMap] = {}

    def map(self, name: str, entries: PMap) -> dcbor.Raw:
        return self._maps.setdefault(name, EncodedMap())(entries)
