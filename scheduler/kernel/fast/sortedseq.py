"""A persistent (immutable) sorted sequence: `add`/`remove` return a new one
that shares all but one block with the old, so the pending queue and the free
index cost a block copy per event instead of a copy of every entry.

Keys live in sorted blocks of at most 2 × _BLOCK; `_maxes` holds each block's
last key, so finding a key is two bisects. Two sequences with the same keys
are equal whatever their block boundaries (incremental vs rebuilt). Under an
edit batch (edit.py: the one open, `current()`) the blocks are lists
changed in place.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from typing import Any

from .edit import Edit, current

_NOTHING = object()   # a part no key has

_BLOCK = 64


class SortedSeq:
    __slots__ = ("_blocks", "_maxes", "_len")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, keys: Iterable[Any] = ()) -> None:
        ordered = sorted(keys)
        blocks = tuple(tuple(ordered[i:i + _BLOCK]) for i in range(0, len(ordered), _BLOCK))
        self._init(blocks, tuple(block[-1] for block in blocks), len(ordered))

    def _init(self, blocks: tuple, maxes: tuple, length: int) -> None:
        self._blocks, self._maxes, self._len = blocks, maxes, length

    def _splice(self, i: int, new: tuple, length: int, removed: Any | None, added: Any | None) -> SortedSeq:
        """A sequence with block i replaced by the blocks `new` (none, one or
        two), after `removed` left and `added` joined it (either may be None)."""
        out = type(self).__new__(type(self))
        SortedSeq._init(out, (*self._blocks[:i], *new, *self._blocks[i + 1:]),
                        (*self._maxes[:i], *(block[-1] for block in new), *self._maxes[i + 1:]), length)
        return out

    def _grown(self, i: int, block: tuple, key: Any, length: int, removed: Any | None) -> SortedSeq:
        """`key` inserted into `block` (block i, maybe already without
        `removed`), split in two if that makes it too long."""
        j = bisect_left(block, key)
        grown = (*block[:j], key, *block[j:])
        new = (grown[:_BLOCK], grown[_BLOCK:]) if len(grown) > 2 * _BLOCK else (grown,)
        return self._splice(i, new, length, removed, key)

    def _home(self, key: Any) -> int:
        """The block a new key goes in: the first whose last key is not
        below it, else the last block (there is at least one)."""
        return min(bisect_left(self._maxes, key), len(self._blocks) - 1)

    def add(self, key: Any) -> SortedSeq:
        edit = current()
        if edit is not None:
            return self._writable(edit)._insert(key, edit)
        return self._added(key)

    def _added(self, key: Any) -> SortedSeq:
        """add, copying: the path that never changes anything in place."""
        blocks = self._blocks
        if not blocks:
            return type(self)((key,))
        i = self._home(key)
        return self._grown(i, blocks[i], key, self._len + 1, None)

    def _shrunk(self, key: Any) -> tuple[int, tuple]:
        """(the block number holding `key`, that block without it)."""
        i, j = self._locate(key)
        block = self._blocks[i]
        return i, (*block[:j], *block[j + 1:])

    def remove(self, key: Any) -> SortedSeq:
        edit = current()
        if edit is not None:
            return self._writable(edit)._pop(key, edit)
        return self._removed(key)

    def _removed(self, key: Any) -> SortedSeq:
        """remove, copying."""
        i, shrunk = self._shrunk(key)
        return self._splice(i, (shrunk,) if shrunk else (), self._len - 1, key, None)

    def replace(self, old: Any | None, new: Any | None) -> SortedSeq:
        """`old` removed and `new` added, either of them None for nothing.
        When `new` sorts into the block `old` leaves (a worker's free key
        moving a little), one block is copied instead of two."""
        if old == new:
            return self
        edit = current()
        if edit is not None:
            return self._writable(edit)._move(old, new, edit)
        if old is None:
            return self.add(new)
        i, shrunk = self._shrunk(old)
        if new is not None and shrunk and self._home(new) == i:
            return self._grown(i, shrunk, new, self._len, old)
        out = self._splice(i, (shrunk,) if shrunk else (), self._len - 1, old, None)
        return out if new is None else out.add(new)

    # -- in place, under an Edit (edit.py): lists the edit owns ------------

    def _writable(self, edit: Edit) -> SortedSeq:
        """This sequence if the edit made it, else a copy it owns, whose block
        list and maxes are lists (the blocks themselves are copied on write)."""
        if id(self) in edit.owned:
            return self
        out = edit.own(type(self).__new__(type(self)))
        out._thaw(self)
        return out

    def _thaw(self, source: SortedSeq) -> None:
        self._blocks, self._maxes, self._len = list(source._blocks), list(source._maxes), source._len

    def _block(self, i: int, edit: Edit) -> list:
        block = self._blocks[i]
        if id(block) not in edit.owned:
            block = self._blocks[i] = edit.own(list(block))
        return block

    def _insert(self, key: Any, edit: Edit) -> SortedSeq:
        if not self._blocks:
            self._thaw(type(self)((key,)))  # the first block, made as a new sequence makes it
            return self
        i = self._home(key)
        block = self._block(i, edit)
        insort(block, key)
        self._len += 1
        if len(block) > 2 * _BLOCK:
            tail = edit.own(block[_BLOCK:])
            del block[_BLOCK:]
            self._blocks.insert(i + 1, tail)
            self._maxes[i:i + 1] = [block[-1], tail[-1]]
            self._split(i)
        else:
            self._maxes[i] = block[-1]
            self._changed(i, None, key)
        return self

    def _locate(self, key: Any) -> tuple[int, int]:
        """(block number, position in it) of a key that is present."""
        i = bisect_left(self._maxes, key)
        j = bisect_left(self._blocks[i], key) if i < len(self._blocks) else 0
        if i == len(self._blocks) or j == len(self._blocks[i]) or self._blocks[i][j] != key:
            raise KeyError(key)
        return i, j

    def _pop(self, key: Any, edit: Edit) -> SortedSeq:
        i, j = self._locate(key)
        block = self._block(i, edit)
        del block[j]
        self._len -= 1
        if block:
            self._maxes[i] = block[-1]
            self._changed(i, key, None)
        else:
            del self._blocks[i], self._maxes[i]
            self._dropped(i)
        return self

    def _move(self, old: Any | None, new: Any | None, edit: Edit) -> SortedSeq:
        """replace() in place; within one block when `new` sorts into the
        block `old` leaves (a worker's free key moving a little)."""
        if old is None or new is None:
            return self._insert(new, edit) if old is None else self._pop(old, edit)
        i, j = self._locate(old)
        if self._home(new) != i:
            return self._pop(old, edit)._insert(new, edit)
        block = self._block(i, edit)
        del block[j]
        insort(block, new)
        self._maxes[i] = block[-1]
        self._changed(i, old, new)
        return self

    # hooks for what a subclass keeps per block (FreeIndex: ceilings)
    def _changed(self, i: int, removed: Any | None, added: Any | None) -> None:
        pass

    def _split(self, i: int) -> None:
        pass

    def _dropped(self, i: int) -> None:
        pass

    def index(self, key: Any) -> int:
        """How many keys sort before `key`."""
        i = bisect_left(self._maxes, key)
        before = sum(len(block) for block in self._blocks[:i])
        return before + (bisect_left(self._blocks[i], key) if i < len(self._blocks) else 0)

    def ceiling(self, key: Any) -> Any | None:
        """The smallest key not below `key`, None when there is none."""
        i = bisect_left(self._maxes, key)
        if i == len(self._blocks):
            return None
        block = self._blocks[i]
        return block[bisect_left(block, key)]

    def firsts(self, part: Callable[[Any], Any], beyond: Callable[[Any], Any],
               start: Any = None, stop: Any = None) -> list:
        """The first key of each run of keys with equal `part(key)`, for a
        `part` that is a prefix of the order (keys with equal parts sit
        together) and where `beyond(value)` sorts after every key of that
        part, among the keys not below `start` and below `stop` (None:
        no bound). A block whose first and last keys have the same part
        holds only that part's keys, and the blocks after it that do too are
        skipped in one bisect; in a block of several parts, a run longer than
        one key is stepped over with one bisect (comparing every key with the
        next is what costs when parts are long tuples)."""
        out: list = []
        blocks, maxes = self._blocks, self._maxes
        i = 0 if start is None else bisect_left(maxes, start)
        seen: Any = _NOTHING
        while i < len(blocks):
            block, last_block = blocks[i], stop is not None and maxes[i] >= stop
            if (start is not None and block[0] < start) or last_block:
                block = block[bisect_left(block, start) if start is not None else 0:
                              bisect_left(block, stop) if last_block else len(block)]
                if not block:
                    if last_block:
                        break
                    i += 1
                    continue
            first = part(block[0])
            if first == part(block[-1]):
                if first != seen:
                    out.append(block[0])
                    seen = first
                if last_block:
                    break
                i = max(i + 1, bisect_right(maxes, beyond(first)))
                continue
            j, n = 0, len(block)
            while j < n:   # run by run: a run longer than one key is stepped over with one bisect
                value = part(block[j])
                if value != seen:
                    out.append(block[j])
                    seen = value
                j += 1
                if j < n and part(block[j]) == value:
                    j = bisect_right(block, beyond(value), j)
            if last_block:
                break
            i += 1
        return out

    def first(self) -> Any | None:
        """The smallest key, None when there is none."""
        return self._blocks[0][0] if self._blocks else None

    def last(self) -> Any | None:
        """The largest key, None when there is none."""
        return self._maxes[-1] if self._maxes else None

    def __iter__(self) -> Iterator[Any]:
        return chain.from_iterable(self._blocks)

    def __len__(self) -> int:
        return self._len

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SortedSeq) and self._len == other._len and all(
            a == b for a, b in zip(self, other))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"


class Shared(SortedSeq):
    """A sorted sequence that is never changed in place, even under an edit
    batch: for one that is handed out of the kernel and kept (a worker's open
    claim ids, `WorkerLoad.active`, which the service records with each
    occupancy version and caches by identity). Each change copies the block
    list (a pointer per 64 keys) and one block: O(n / 64) rather than the
    sorted tuple's O(n)."""

    __slots__ = ()

    add = SortedSeq._added
    remove = SortedSeq._removed

    def replace(self, old: Any | None, new: Any | None) -> SortedSeq:
        raise NotImplementedError("a Shared sequence changes by add and remove")

    def difference(self, newer: Shared) -> tuple[set, set]:
        """(the keys only this one has, the keys only `newer` has), reading
        only the blocks the two do not share: since neither is ever changed
        in place, a shared block holds the same keys in both, so between one
        sequence and another made from it by k changes this costs a look at
        each block and the keys of about k blocks, not every key. Its plain
        twin is two set differences (tests/kernel/test_loads.py)."""
        mine, theirs = {id(b) for b in self._blocks}, {id(b) for b in newer._blocks}
        gone = {k for b in self._blocks if id(b) not in theirs for k in b}
        came = {k for b in newer._blocks if id(b) not in mine for k in b}
        return gone - came, came - gone
