"""A checkpoint body restores exactly the state it was taken from, after any
sequence of operations, and holds only det-CBOR values."""

from hypothesis import given
from strategies import base, drive, operations, trees

from scheduler.kernel import ClusterState
from scheduler.kernel.checkpoint import restore, snapshot
from scheduler.ledger import dcbor


@given(trees(), operations)
def test_restore_of_a_signed_snapshot_is_the_same_state(tenants, ops):
    for state in drive(base(tenants), ops).states:
        body = dcbor.decode(dcbor.encode(snapshot(state)))   # what a checkpoint receipt carries
        assert restore(body) == state


def test_the_empty_state_round_trips():
    assert restore(dcbor.decode(dcbor.encode(snapshot(ClusterState())))) == ClusterState()
