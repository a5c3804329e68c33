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

from bisect import bisect_left, bisect_right
from itertools import islice
from collections.abc import Callable, Iterator
from typing import Any

from scheduler.kernel import ClusterState
from scheduler.kernel.codec import encode_compact
from scheduler.kernel.fast.pmap import MISSING, PMap, walk_changes
from scheduler.ledger import dcbor


BLOCK = 256   # items a block holds (up to twice that): a change joins its block again, not every item


class Sorted:
    """Items in ascending order of their places, in blocks of about BLOCK,
    each block's items joined once and kept until one of them changes: a
    checkpoint joins a few hundred blocks rather than every item again, and an
    insertion moves one block's entries rather than every one's."""

    def __init__(self, places: list | None = None, items: list[bytes] | None = None) -> None:
        places, items = places or [], items or []
        self._firsts = [places[at] for at in range(0, len(places), BLOCK)]   # each block's first place
        self._blocks = [[places[at:at + BLOCK], items[at:at + BLOCK], None]   # places, items, joined
                        for at in range(0, len(places), BLOCK)]
        self.count = len(places)

    def put(self, place: Any, item: bytes, new: bool) -> None:
        """`item` at `place`: a new one, or the one there replaced."""
        if not self._blocks:
            self._firsts.append(place)
            self._blocks.append([[], [], None])
        b = max(bisect_right(self._firsts, place) - 1, 0)
        block = self._blocks[b]
        places, items = block[0], block[1]
        at = bisect_left(places, place)
        block[2] = None
        if not new:
            items[at] = item
            return
        places.insert(at, place)
        items.insert(at, item)
        self.count += 1
        if at == 0:
            self._firsts[b] = place
        if len(places) > 2 * BLOCK:   # split in two
            half = len(places) // 2
            self._blocks.insert(b + 1, [places[half:], items[half:], None])
            self._firsts.insert(b + 1, places[half])
            del places[half:], items[half:]

    def remove(self, place: Any) -> None:
        b = bisect_right(self._firsts, place) - 1
        block = self._blocks[b]
        places, items = block[0], block[1]
        at = bisect_left(places, place)
        del places[at], items[at]
        self.count -= 1
        block[2] = None
        if not places:
            del self._blocks[b], self._firsts[b]
        elif at == 0:
            self._firsts[b] = places[0]

    def parts(self) -> list[bytes]:
        """The items joined, a block each, in order."""
        out = []
        for block in self._blocks:
            if block[2] is None:
                block[2] = b"".join(block[1])
            out.append(block[2])
        return out

    def items(self) -> list[bytes]:
        return [item for block in self._blocks for item in block[1]]


class EncodedEntries:
    """One id-keyed map's entries as det-CBOR items in `order`, kept between
    calls. `item(key, value)` is an entry's encoding.

    Brought to a newer map either at once (`update`) or in a pass of small
    steps (`start`, then `step` until it says done) that a caller runs between
    other work; `update` first finishes a pass in progress, so the two mix.
    The changes are walked as the steps take them (fast/pmap.walk_changes),
    and each goes into its block (`Sorted`), so no step costs more than its
    `n` entries, however many changed (after a start-up: every one)."""

    def __init__(self, item: Callable[[Any, Any], bytes], order: Callable[[Any], Any]) -> None:
        self._item, self._order = item, order
        self._map = PMap()                    # the map the items were made from
        self._sorted = Sorted()               # each entry's encoding, by its order
        self._place_of: dict[Any, Any] = {}   # each entry's order, by key
        self._toward: PMap | None = None      # the map a pass in progress brings them to
        self._todo: list = []                 # its changes walked and not applied yet, last first
        self._rest: Iterator = iter(())       # those not walked yet

    def update(self, new: PMap) -> Sorted:
        """The items of `new`, in order."""
        self.start(new)
        self.finish()
        return self._sorted

    def start(self, new: PMap) -> None:
        """Begin a pass toward `new` (one in progress is finished first)."""
        self.finish()
        self._toward, self._todo, self._rest = new, [], walk_changes(self._map, new)

    def step(self, n: int) -> bool:
        """Apply up to `n` of the pass's changes; true once it is done (or
        there is none)."""
        if self._toward is None:
            return True
        todo, kept, place_of, item, order = self._todo, self._sorted, self._place_of, self._item, self._order
        if len(todo) <= n:   # one more than it takes: none left after them means the walk is done
            todo[:0] = list(islice(self._rest, n + 1 - len(todo)))[::-1]
        for _ in range(min(n, len(todo))):
            key, before, value = todo.pop()
            if value is MISSING:
                kept.remove(place_of.pop(key))
            elif before is MISSING:
                place = place_of[key] = order(key)
                kept.put(place, item(key, value), True)
            else:
                kept.put(place_of[key], item(key, value), False)
        if todo:
            return False
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
        kept = self.entries.update(state.claims)
        return dcbor.array(kept.parts(), kept.count)


class EncodedMap:
    """An id-keyed map of the service's state as `dict(sorted(map.items()))`
    encodes it."""

    def __init__(self) -> None:
        self.entries = EncodedEntries(_pair, dcbor.key_place)

    def __call__(self, entries: PMap) -> dcbor.Raw:
        kept = self.entries.update(entries)
        return dcbor.mapping(kept.count, kept.parts())


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
