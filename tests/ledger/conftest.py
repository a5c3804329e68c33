"""Shared ledger fixtures: a steward key, and a builder of receipt lists from
(kind, body) pairs — lower level than a Steward, so tests can forge histories."""

from collections.abc import Callable

import pytest

from scheduler.ledger import keys, receipts

Build = Callable[..., list[bytes]]


@pytest.fixture(scope="session")
def steward_key() -> keys.SigningKey:
    return keys.generate()


@pytest.fixture(scope="session")
def build(steward_key) -> Build:
    def build(entries, key=None, genesis_key=None) -> list[bytes]:
        key = key or steward_key
        genesis = {"steward_key": (genesis_key or key).public.raw}
        out, prev = [], receipts.ZERO_HASH
        for seq, (kind, body) in enumerate([("genesis", genesis)] + list(entries)):
            made = receipts.make(key, seq, prev, 1_700_000_000_000_000_000 + seq, kind, body)
            out.append(made.raw)
            prev = made.hash
        return out
    return build


@pytest.fixture(scope="session")
def small(build) -> list[bytes]:
    """A genesis and five caller receipts."""
    return build([("claim.submitted", {"claim": f"c{i}", "hold_uj": 1000 * i}) for i in range(5)])
