"""The free index: live workers sorted by their best-fit key (free mdev, cpu,
memory, disk, id; see placement.free_key), with each block's *ceiling*, the
most free cpu, memory and disk of any entry in it. A placement walks the
index from the request's mdev and skips every block whose ceiling cannot
cover the request, so a full cluster costs a pass over blocks, not workers.

A ceiling is kept exact: raised on add, recomputed when a removal takes one
of its maxima.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from operator import itemgetter

from .sortedseq import SortedSeq

_CPU, _MEMORY, _DISK = itemgetter(1), itemgetter(2), itemgetter(3)


def _ceiling(block: tuple) -> tuple[int, int, int]:
    return max(block, key=_CPU)[1], max(block, key=_MEMORY)[2], max(block, key=_DISK)[3]


def _kept_ceiling(old: tuple[int, int, int], block: tuple, removed, added) -> tuple[int, int, int]:
    """A block's ceiling after `removed` left it and `added` joined it, per
    field: only a field whose maximum left, with nothing as large joining,
    is recomputed (a worker's disk, untouched by most claims, ties at the
    maximum all the time)."""
    out = []
    for f, top in enumerate(old, 1):
        if added is not None and added[f] >= top:
            out.append(added[f])
        elif removed is None or removed[f] < top:
            out.append(top)
        else:
            out.append(max(map(itemgetter(f), block)))
    return out[0], out[1], out[2]


class FreeIndex(SortedSeq):
    __slots__ = ("_ceilings",)

    def _init(self, blocks: tuple, maxes: tuple, length: int) -> None:
        super()._init(blocks, maxes, length)
        self._ceilings = tuple(_ceiling(block) for block in blocks)

    def _splice(self, i: int, new: tuple, length: int, removed, added) -> FreeIndex:
        out = super()._splice(i, new, length, removed, added)
        if len(new) == 1:
            ceilings = _kept_ceiling(self._ceilings[i], new[0], removed, added),
        else:
            ceilings = tuple(_ceiling(block) for block in new)  # split or emptied
        out._ceilings = (*self._ceilings[:i], *ceilings, *self._ceilings[i + 1:])
        return out

    def _thaw(self, source: FreeIndex) -> None:
        super()._thaw(source)
        self._ceilings = list(source._ceilings)

    def _changed(self, i: int, removed, added) -> None:
        self._ceilings[i] = _kept_ceiling(self._ceilings[i], self._blocks[i], removed, added)

    def _split(self, i: int) -> None:
        self._ceilings[i:i + 1] = [_ceiling(self._blocks[i]), _ceiling(self._blocks[i + 1])]

    def _dropped(self, i: int) -> None:
        del self._ceilings[i]

    def covering(self, mdev: int, cpu: int, memory: int, disk: int) -> Iterator[str]:
        """Worker ids in best-fit order from `mdev` whose free cpu, memory
        and disk cover the request (a necessary condition, checked cheaply)."""
        # the ceiling test comes first: every placement passes here, and
        # most blocks are skipped without a slice
        blocks, ceilings, start = self._blocks, self._ceilings, (mdev, cpu)
        first = bisect_left(self._maxes, start)
        for n in range(first, len(blocks)):
            top_cpu, top_memory, top_disk = ceilings[n]
            if top_cpu < cpu or top_memory < memory or top_disk < disk:
                continue
            block = blocks[n]
            for _, free_cpu, free_memory, free_disk, worker_id in (
                    block[bisect_left(block, start):] if n == first else block):
                if free_cpu >= cpu and free_memory >= memory and free_disk >= disk:
                    yield worker_id
