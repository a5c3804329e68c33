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
(tests/service/test_encoded.py). Between checkpoints the engine brings them
to the latest state a few entries at a time (`Encoded.follow`, run by
Engine.keep_encoded between calls), so a checkpoint finds little to do.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import islice
from collections.abc import Callable, Iterator
from typing import Any

from scheduler.kernel import ClusterState
from scheduler.kernel.codec import encode_compact
from scheduler.kernel.fast.pmap import MISSING, PMap, walk_changes
from scheduler.ledger import dcbor


class EncodedEntries:
    """One id-keyed map's entries as det-CBOR items in `order`, kept between
    calls. `item(key, value)` is an entry's encoding.

    Brought to a newer map either at once (`update`) or in a pass of small
    steps (`start`, then `step` until it says done) that a caller runs between
    other work; `update` first finishes a pass in progress, so the two mix."""

    def __init__(self, item: Callable[[Any, Any], bytes], order: Callable[[Any], Any]) -> None:
        self._item, self._order = item, order
        self._map = PMap()             # the map the items were made from
        self._places: list = []        # each entry's order, ascending
        self._items: list[bytes] = []  # each entry's encoding, in that order
        self._by_key: dict[Any, bytes] = {}
        self._place_of: dict[Any, Any] = {}   # each entry's order, by key
        self._toward: PMap | None = None   # the map a pass in progress brings them to
        self._todo: list = []              # its changes walked and not applied yet, last first
        self._rest: Iterator = iter(())    # those not walked yet
        self._resort = False               # its changes are many: items sorted again at its end

    def update(self, new: PMap) -> list[bytes]:
        """The items of `new`, in order."""
        self.start(new)
        self.finish()
        return self._items

    def start(self, new: PMap) -> None:
        """Begin a pass toward `new` (one in progress is finished first). The
        changes are walked as the steps take them (fast/pmap.walk_changes),
        past the first few that tell whether they are many."""
        self.finish()
        walk = walk_changes(self._map, new)
        many = 64 + len(self._items) // 8
        first = list(islice(walk, many + 1))
        self._toward, self._todo, self._rest = new, first[::-1], walk   # the list taken from its end
        self._resort = len(first) > many   # many: sorted all again, once, at the pass's end

    def step(self, n: int) -> bool:
        """Apply up to `n` of the pass's changes; true once it is done (or
        there is none)."""
        if self._toward is None:
            return True
        todo, by_key, place_of, item, order = self._todo, self._by_key, self._place_of, self._item, self._order
        if self._resort:   # the places of new keys found now, a step at a time; sorted at the end
            if len(todo) <= n:   # one more than it takes: none left after them means the walk is done
                todo[:0] = list(islice(self._rest, n + 1 - len(todo)))[::-1]
            for _ in range(min(n, len(todo))):
                key, before, value = todo.pop()
                if value is MISSING:
                    del by_key[key], place_of[key]
                    continue
                by_key[key] = item(key, value)
                if before is MISSING:
                    place_of[key] = order(key)
        else:
            places, items = self._places, self._items
            for _ in range(min(n, len(todo))):
                key, before, value = todo.pop()
                place = place_of[key] if before is not MISSING else order(key)
                at = bisect_left(places, place)
                if value is MISSING:
                    del places[at], items[at], by_key[key], place_of[key]
                    continue
                data = by_key[key] = item(key, value)
                if before is MISSING:
                    places.insert(at, place)
                    items.insert(at, data)
                    place_of[key] = place
                else:
                    items[at] = data
        if todo:
            return False
        if self._resort:   # one sort, its key a dict look-up (no Python call per comparison or key)
            keys = sorted(by_key, key=place_of.__getitem__)
            self._places, self._items = list(map(place_of.__getitem__, keys)), list(map(by_key.__getitem__, keys))
        self._map, self._toward = self._toward, None
        return True

    def finish(self) -> None:
        """The pass in progress, done now."""
        self._todo[:0] = list(self._rest)[::-1]
        self.step(len(self._todo))


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
        self.entries = EncodedEntries(_claim, lambda claim_id: claim_id)

    def __call__(self, state: ClusterState) -> dcbor.Raw:
        return dcbor.array(self.entries.update(state.claims))


class EncodedMap:
    """An id-keyed map of the service's state as `dict(sorted(map.items()))`
    encodes it."""

    def __init__(self) -> None:
        self.entries = EncodedEntries(_pair, dcbor.key_place)

    def __call__(self, entries: PMap) -> dcbor.Raw:
        items = self.entries.update(entries)
        return dcbor.mapping(len(items), b"".join(items))


class Encoded:
    """What state.snapshot keeps between checkpoints: the claims, and each
    per-claim map by its name."""

    def __init__(self) -> None:
        self.claims = EncodedClaims()
        self._maps: dict[str, EncodedMap] = {}

    def map(self, name: str, entries: PMap) -> dcbor.Raw:
        return self._maps.setdefault(name, EncodedMap())(entries)

    def follow(self, claims: PMap, maps: dict[str, PMap], chunk: int) -> Iterator[None]:
        """A pass bringing every kept encoding to these maps (a state's claims,
        and its per-claim maps by name), `chunk` entries at a time: it yields
        between chunks, where the caller lets other work run. A checkpoint
        taken meanwhile finishes the part in progress first, then encodes what
        changed since, so at a checkpoint only that is left to encode."""
        parts = [(self.claims.entries, claims),
                 *((self._maps.setdefault(name, EncodedMap()).entries, new) for name, new in maps.items())]
        for entries, new in parts:
            entries.start(new)
            while not entries.step(chunk):
                yield
