"""Fast constructors for the NamedTuple records made on every decision.

A NamedTuple's own `__new__` is a Python-level call, and typing's
`_replace` pops every field's name from the changes, a C call per field
(ClusterState has 24, and `apply` replaces it on every event). The plain
twins are the record's constructor and typing's `_replace`;
tests/kernel/test_records.py holds each of these equal to its twin.
"""

from __future__ import annotations

from itertools import repeat

from ..fit import Fit

new_tuple = tuple.__new__  # new_tuple(Cls, values): a NamedTuple built without its Python-level __new__


def quick_replace(cls: type) -> type:
    """Give a NamedTuple a `_replace` that writes the named fields into a
    copy of its values."""
    position = {name: i for i, name in enumerate(cls._fields)}

    def _replace(self, /, **changes):
        values = list(self)
        for name, value in changes.items():
            try:
                values[position[name]] = value
            except KeyError:
                raise ValueError(f"Got unexpected field name: {name!r}") from None
        return new_tuple(cls, values)

    cls._replace = _replace
    return cls


def rows(cls: type, *columns) -> tuple:
    """`tuple(cls(*values) for values in zip(*columns))`, built without a
    Python-level call per record (explain builds one row per worker). A
    column for every field: defaults are not filled in."""
    return tuple(map(new_tuple, repeat(cls), zip(*columns)))


def fit(ok: bool, node: str, guarantee: int, usage: int, allowance: int = 0, limit: int | None = None) -> Fit:
    """`Fit(...)`, as entitlement.py makes several per decision."""
    return new_tuple(Fit, (ok, node, guarantee, usage, allowance, limit))
