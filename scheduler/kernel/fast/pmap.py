"""A persistent (immutable) hash map: `set`/`delete` return a new map that
shares all but one path with the old one, so a snapshot of 10^5 claims costs
O(log n) per event instead of a full copy. A hash trie, 32-way, whose leaves are
small dicts split once they pass 32 keys. Under an `Edit` (see edit.py),
nodes the batch made are changed in place.

Iteration order follows the hashes, so callers that need an order must sort.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .edit import Edit, current

_BITS = 5
_MASK = (1 << _BITS) - 1
_LEAF_MAX = 32
_MAX_SHIFT = 64


class _Branch(dict):
    __slots__ = ()


class _Leaf(dict):
    __slots__ = ()


_MISSING = object()


def _split(leaf: _Leaf, shift: int, owned: dict | None) -> _Branch:
    branch = _Branch()
    for key, value in leaf.items():
        index = (hash(key) >> shift) & _MASK
        child = branch.get(index)
        if child is None:
            child = branch[index] = _Leaf()
            if owned is not None:
                owned[id(child)] = child
        child[key] = value
    if owned is not None:
        owned[id(branch)] = branch
    return branch


def _copy(node: dict, owned: dict | None) -> dict:
    """A copy of a node the edit session does not own; the session owns the
    copy. `owned` is an Edit's table, or None outside a session."""
    new = type(node)(node)
    if owned is not None:
        owned[id(new)] = new
    return new


def _set(node: dict, h: int, shift: int, key: Any, value: Any, owned: dict | None) -> tuple[dict, bool]:
    # in a batch most writes land in nodes it made: written in place, not copied
    if type(node) is _Branch:
        index = (h >> shift) & _MASK
        child = node.get(index)
        if child is None:
            new_child, added = _Leaf({key: value}), True
            if owned is not None:
                owned[id(new_child)] = new_child
        else:
            new_child, added = _set(child, h, shift + _BITS, key, value, owned)
            if new_child is child:
                return node, added  # changed in place below: so is this path, which the edit made
        if owned is None or id(node) not in owned:
            node = _copy(node, owned)
        node[index] = new_child
        return node, added
    added = key not in node
    if owned is None or id(node) not in owned:
        node = _copy(node, owned)
    node[key] = value
    if added and len(node) > _LEAF_MAX and shift < _MAX_SHIFT:
        return _split(node, shift, owned), True
    return node, added


def _delete(node: dict, h: int, shift: int, key: Any, owned: dict | None) -> dict | None:
    new = node if owned is not None and id(node) in owned else _copy(node, owned)
    if type(node) is _Branch:
        index = (h >> shift) & _MASK
        new_child = _delete(node[index], h, shift + _BITS, key, owned)
        if new_child:
            new[index] = new_child
        else:
            del new[index]
        return new
    del new[key]
    return new


def _built(items: Mapping, keys: list, shift: int) -> dict:
    """The trie of `keys` (distinct, with their values in `items`) below
    `shift`, made whole: every node once, where setting the keys one by one
    copies a node per key (a checkpoint's 10^5 claims at start-up). The same
    shape: a leaf once it holds at most _LEAF_MAX keys (or the hash bits run
    out), else a branch by the next bits."""
    if len(keys) <= _LEAF_MAX or shift >= _MAX_SHIFT:
        return _Leaf({key: items[key] for key in keys})
    buckets: dict[int, list] = {}
    for key in keys:
        index = (hash(key) >> shift) & _MASK
        bucket = buckets.get(index)
        if bucket is None:
            buckets[index] = [key]
        else:
            bucket.append(key)
    return _Branch({index: _built(items, bucket, shift + _BITS) for index, bucket in buckets.items()})


def _leaves(root: dict) -> list[_Leaf]:
    """Every leaf: a loop, not a recursive generator, since explain and the
    views walk maps of every worker."""
    if type(root) is not _Branch:
        return [root]
    out, branches = [], [root]
    while branches:
        # a branch's children are mostly leaves (a split leaf spreads its
        # keys over up to 32): take them as they come, stack only branches
        for child in branches.pop().values():
            if type(child) is _Branch:
                branches.append(child)
            else:
                out.append(child)
    return out


def _gather(root: dict, part=dict.items) -> list:
    """Every leaf's items (or values, with part=dict.values), in one list."""
    out: list = []
    for leaf in _leaves(root):
        out.extend(part(leaf))
    return out


MISSING = _MISSING   # what `changes` gives for a key one of the two maps lacks
_NO_NODE = _Leaf()   # an absent child, for `changes`; never written
_NO_BRANCH = _Branch()   # an empty leaf against a branch, for `walk_changes`; never written


def _flat(node: dict) -> dict:
    """A node's entries as one dict (a leaf is one already)."""
    if type(node) is not _Branch:
        return node
    out: dict = {}
    for leaf in _leaves(node):
        out.update(leaf)
    return out


def changes(old: PMap, new: PMap) -> list[tuple[Any, Any, Any]]:
    """(key, its value in `old`, its value in `new`) for every key whose value
    is not the same object in both (MISSING where a map lacks the key),
    walking only the nodes the two do not share: between a map and one made
    from it by k changes, O(k) paths rather than every key. Its plain twin
    compares every key (tests/kernel/test_edit.py)."""
    return list(walk_changes(old, new))


def walk_changes(old: PMap, new: PMap) -> Iterator[tuple[Any, Any, Any]]:
    """`changes` as it walks, a leaf at a time: a caller can take some and
    come back for the rest (both maps are immutable), so no step walks them
    all (service/encoded.py's passes between calls)."""
    stack = [(old._root, new._root)]
    while stack:
        a, b = stack.pop()
        if a is b:
            continue
        if type(a) is not type(b) and (not a or not b):   # nothing against a branch (a map from or to
            a, b = a or _NO_BRANCH, b or _NO_BRANCH             # empty): its leaves one at a time, not flattened
        if type(a) is _Branch and type(b) is _Branch:
            for index in a.keys() | b.keys():
                x, y = a.get(index, _NO_NODE), b.get(index, _NO_NODE)
                if x is not y:
                    stack.append((x, y))
            continue
        x, y = _flat(a), _flat(b)   # a leaf against a leaf, or against a branch it was split into
        out = []
        for key, value in x.items():
            other = y.get(key, _MISSING)
            if other is not value:
                out.append((key, value, other))
        for key, value in y.items():
            if key not in x:
                out.append((key, _MISSING, value))
        yield from out


class PMap(Mapping):
    __slots__ = ("_root", "_len")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, items: Mapping | None = None) -> None:
        items = items if items is not None else {}
        self._root = _built(items, list(items), 0)
        self._len = len(items)

    @classmethod
    def _make(cls, root: dict, length: int) -> PMap:
        new = cls.__new__(cls)
        new._root = root
        new._len = length
        return new

    def get(self, key: Any, default: Any = None) -> Any:
        node = self._root
        h = hash(key)
        shift = 0
        while type(node) is _Branch:
            node = node.get((h >> shift) & _MASK)
            if node is None:
                return default
            shift += _BITS
        return node.get(key, default)

    def __getitem__(self, key: Any) -> Any:
        # the walk of get(), inlined: this is the kernel's hottest lookup
        node = self._root
        h = hash(key)
        shift = 0
        while type(node) is _Branch:
            node = node.get((h >> shift) & _MASK)
            if node is None:
                raise KeyError(key)
            shift += _BITS
        return node[key]

    def __contains__(self, key: object) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Any]:
        return iter(_gather(self._root, dict.keys))

    def items(self):  # type: ignore[override]
        return _gather(self._root)

    def values(self):  # type: ignore[override]
        return _gather(self._root, dict.values)

    def to_dict(self) -> dict:
        """A plain dict of the same entries, merged leaf by leaf (explain
        looks up every worker in one)."""
        out: dict = {}
        for leaf in _leaves(self._root):
            out.update(leaf)
        return out

    def set(self, key: Any, value: Any) -> PMap:
        """A map with `key` set; in place where the edit batch open here
        (edit.current) made the nodes."""
        edit = current()
        if edit is None:
            root, added = _set(self._root, hash(key), 0, key, value, None)
            return PMap._make(root, self._len + added)
        owned, h = edit.owned, hash(key)
        if id(self) in owned:
            # the batch's own map: when the batch made the key's leaf, it made
            # the path to it too (a copy is linked in by copying its parents),
            # so the leaf is written in place, unless it would have to split
            node, shift = self._root, 0
            while type(node) is _Branch:
                node = node.get((h >> shift) & _MASK)
                shift += _BITS
            if node is not None and id(node) in owned and (key in node or len(node) < _LEAF_MAX):
                self._len += key not in node
                node[key] = value
                return self
        root, added = _set(self._root, h, 0, key, value, owned)
        return self._edited(root, self._len + added, edit)

    def delete(self, key: Any) -> PMap:
        edit = current()
        if key not in self:
            raise KeyError(key)
        root = _delete(self._root, hash(key), 0, key, edit and edit.owned) or _Leaf()
        return PMap._make(root, self._len - 1) if edit is None else self._edited(root, self._len - 1, edit)

    def _edited(self, root: dict, length: int, edit: Edit) -> PMap:
        """Under an edit the map object itself is the batch's too: changed in
        place once made, so a caller can tell an unchanged identity."""
        if id(self) in edit.owned:
            self._root, self._len = root, length
            return self
        return edit.own(PMap._make(root, length))

    def discard(self, key: Any) -> PMap:
        return self.delete(key) if key in self else self

    def __repr__(self) -> str:
        return f"PMap({dict(sorted(self.items(), key=lambda kv: repr(kv[0])))!r})"
