"""Shared ledger fixtures: a steward key, and a builder of receipt lists from
(kind, body) pairs — lower level than a Steward, so tests can forge histories."""

from collections.abc import Callable

import pytest

from scheduler.ledger import dcbor, index, keys, merkle, receipts

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
            made = receipts.make(key, seq, prev, 1_700_000_000_000_000_000 + seq, kind,
                                  dcbor.normalize(body))
            out.append(made.raw)
            prev = made.hash
        return out
    return build


@pytest.fixture(scope="session")
def small(build) -> list[bytes]:
    """A genesis and five caller receipts."""
    return build([("claim.submitted", {"claim": f"c{i}", "hold_uj": 1000 * i}) for i in range(5)])


class MemoryStore:
    """The Store interface over a list: proof that the interface is small, and
    fast storage for property tests. `rows` may be edited to simulate tampering."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, bytes]] = []
        self.commits = 0
        self.frontier, self.nodes, self.claims = merkle.Frontier(), {}, {}

    def length(self) -> int:
        return len(self.rows)

    def read(self, start=0, stop=None):
        return (raw for _, raw in self.rows[start:stop])

    def append(self, first_seq, receipts, claims=None) -> None:
        assert first_seq == len(self.rows)
        self.rows.extend(receipts)
        self.commits += 1
        for claim, seq in index.claims_in(first_seq, [raw for _, raw in receipts]) if claims is None else claims:
            self.claims.setdefault(claim, []).append(seq)
        for level, at, value in self.frontier.extend(merkle.leaf_hash(raw) for _, raw in receipts):
            self.nodes[level, at] = value

    def tree_node(self, level, at):
        return self.nodes[level, at]

    def tree_rows(self):
        return [(level, at, value) for (level, at), value in self.nodes.items()]

    def claim_seqs(self, claim):
        return self.claims.get(claim, [])

    def latest(self, kind):
        return max((i for i, (k, _) in enumerate(self.rows) if k == kind), default=None)

    def close(self) -> None:
        pass


@pytest.fixture
def memory_store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture(scope="session")
def new_memory_store() -> type[MemoryStore]:
    """For @given tests, which may not use function-scoped fixtures."""
    return MemoryStore
