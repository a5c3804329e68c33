"""The kernel's records: `quick_replace` (fast/records.py) behaves as typing's `_replace`, and
`fit`, `rows` and `shape_of` make what the records' own constructors make."""

from __future__ import annotations

from collections import namedtuple
from itertools import repeat

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.kernel.fast.records import fit, rows
from scheduler.kernel.fast.shapes import Shape, shape_of
from scheduler.kernel.fit import Fit
from scheduler.kernel.reasons import Placement
from scheduler.kernel.snapshot import Claim, ClaimSpec, ClusterState, Resources


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


@given(st.lists(st.tuples(st.booleans(), st.text(max_size=4)), max_size=5))
def test_rows_equal_the_plain_constructor(values):
    """`rows`, explain's per-worker constructor, makes what the record's own does."""
    made = rows(Fit, [v[0] for v in values], [v[1] for v in values], repeat(0), repeat(1), repeat(2), repeat(None))
    assert made == tuple(Fit(ok, node, 0, 1, 2, None) for ok, node in values)
    assert all(type(f) is Fit for f in made)


@given(st.text(max_size=4), st.integers(-5, 5), st.sampled_from(list(Placement)), st.none() | st.integers(0, 9),
       st.text(max_size=3), st.integers(0, 2000), st.lists(st.sampled_from(["A100", "H200"]), unique=True))
def test_shape_of_equals_the_plain_constructor(tenant, priority, placement, estimate, work_class, mdev, types):
    """fast/shapes.py's `shape_of` builds what `Shape(...)` builds, by name."""
    spec = ClaimSpec("c", tenant, Resources(1, 2, 3, mdev, tuple(sorted(types))), placement, estimate, work_class,
                     priority)
    made = shape_of(spec)
    assert type(made) is Shape
    assert made == Shape(tenant=tenant, priority=priority, placement=placement,
                         estimate_uj=-1 if estimate is None else estimate, work_class=work_class, cpu_millis=1,
                         memory_mb=2, disk_mb=3, gpu_mdev=mdev, gpu_types=tuple(sorted(types)))
