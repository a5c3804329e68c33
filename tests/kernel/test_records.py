"""The kernel's records: `quick_replace` behaves as typing's `_replace`."""

from __future__ import annotations

from collections import namedtuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
