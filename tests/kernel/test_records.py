"""The kernel's records: `quick_replace` (fast/records.py) behaves as typing's `_replace`, and
`fit` makes what `Fit(...)` makes."""

from __future__ import annotations

from collections import namedtuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.kernel.fast.records import fit
from scheduler.kernel.fit import Fit
from scheduler.kernel.snapshot import Claim, ClaimSpec, ClusterState


@pytest.mark.parametrize("record", [Claim(ClaimSpec("c", "t"), 1), ClusterState()])
@given(data=st.data())
def test_quick_replace_equals_the_standard_one(record, data):
    cls = type(record)
    plain = namedtuple(cls.__name__, cls._fields)(*record)  # the standard _replace
    names = data.draw(st.lists(st.sampled_from(cls._fields), unique=True))
    changes = {name: data.draw(st.integers()) for name in names}
    replaced = record._replace(**changes)
    assert type(replaced) is cls
    assert tuple(replaced) == tuple(plain._replace(**changes))
    assert tuple(record) == tuple(plain)  # the original is untouched
    with pytest.raises(ValueError, match="unexpected field"):
        record._replace(no_such_field=1)


_ints = st.integers(-(2 ** 70), 2 ** 70)


@given(st.booleans(), st.text(max_size=8), _ints, _ints, st.one_of(st.none(), st.tuples(_ints, st.none() | _ints)))
def test_fit_equals_the_plain_constructor(ok, node, guarantee, usage, rest):
    """`fit`, entitlement's fast constructor, makes what `Fit(...)` makes,
    with the same defaults."""
    extra = {} if rest is None else {"allowance": rest[0], "limit": rest[1]}
    made = fit(ok, node, guarantee, usage, *extra.values())
    assert type(made) is Fit
    assert made == Fit(ok=ok, node=node, guarantee=guarantee, usage=usage, **extra)
    assert made._asdict() == {"ok": ok, "node": node, "guarantee": guarantee, "usage": usage,
                              "allowance": extra.get("allowance", 0), "limit": extra.get("limit")}
