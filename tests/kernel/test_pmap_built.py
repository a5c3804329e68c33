"""PMap(mapping) builds its trie whole (fast/pmap.py `_built`); its plain twin
is setting the keys one by one into an empty map. The two hold the same
entries, answer every lookup alike, and the whole-built map is changed by
set/delete (in an edit batch or not) exactly as the other is, at every depth
of the trie (4 x 10^4 string keys reach three levels of branches)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from scheduler.kernel.fast.edit import Edit
from scheduler.kernel.fast.pmap import PMap, _Branch


def one_by_one(items: dict) -> PMap:
    built = PMap()
    for key, value in items.items():
        built = built.set(key, value)
    return built


def depth(node) -> int:
    return 1 + max((depth(child) for child in node.values()), default=0) if type(node) is _Branch else 0


@settings(max_examples=15, deadline=None)
@example(40_000, 1, [(True, 5), (True, 40_001), (False, 6), (False, 7)], True)
@example(40_000, 2, [(True, 5), (False, 6)], False)
@given(st.integers(0, 40_000), st.integers(0, 2**32), st.lists(st.tuples(st.booleans(), st.integers(0, 45_000)),
                                                                max_size=200), st.booleans())
def test_a_map_built_whole_equals_one_built_key_by_key(size, salt, changes, in_batch):
    items = {f"claim-{salt}-{i}": i for i in range(size)}
    whole, plain = PMap(items), one_by_one(items)
    assert len(whole) == len(plain) == size
    assert dict(whole.items()) == dict(plain.items()) == items
    assert all(whole[k] == v and k in whole for k, v in items.items())
    assert "absent" not in whole and whole.get("absent", 7) == 7
    if size >= 40_000:
        assert depth(whole._root) >= 3
    edit = Edit()
    for put, i in changes:   # the whole-built trie goes on changing like the other
        key = f"claim-{salt}-{i}"
        if put:
            if in_batch:
                with edit:
                    whole = whole.set(key, -i)
            else:
                whole = whole.set(key, -i)
            plain, items[key] = plain.set(key, -i), -i
        elif key in items:
            whole, plain = whole.delete(key), plain.delete(key)
            del items[key]
    assert dict(whole.items()) == dict(plain.items()) == items and len(whole) == len(items)


def test_an_empty_mapping_builds_an_empty_map():
    assert len(PMap({})) == len(PMap()) == 0 and dict(PMap({}).items()) == {}
