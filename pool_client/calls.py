"""Every RPC of claims.proto and ops.proto the library offers, and whether a
call that was sent and got no answer (an unknown outcome) is sent again.

RESEND is the one home of that rule; docs/USER-GUIDE.md ("Sending again")
prints it as a table and tests/client/test_docs.py checks the two agree.
A call that never ran (no connection, NOT_LEADER, NOT_READY) is always sent
again, whatever this table says.
"""

from __future__ import annotations

from typing import NamedTuple


class Rpc(NamedTuple):
    service: str        # "Claims" or "Operations"
    name: str           # the RPC's name in the .proto
    method: str         # the library's method name
    resend: bool        # an unknown outcome is sent again
    why: str            # what makes a second sending safe, or why it is not sent again


RPCS: tuple[Rpc, ...] = (
    Rpc("Claims", "Submit", "submit", True, "an identical request is answered as the first one was"),
    Rpc("Claims", "SubmitMany", "submit_many", True, "an identical request is answered as the first one was"),
    Rpc("Claims", "Progress", "progress", True, "completed_units is cumulative: the same count again changes nothing"),
    Rpc("Claims", "Release", "release", True,
        "a second Release by the same caller answers the released status (the library also reads the claim "
        "back when a resent Release is answered CLAIM_NOT_OPEN)"),
    Rpc("Claims", "Get", "get", True, "a read"),
    Rpc("Claims", "List", "list", True, "a read"),
    Rpc("Claims", "Watch", "watch", True, "a read; resumed after the last event seen"),
    Rpc("Claims", "Plan", "plan", True, "a dry run, no state change"),
    Rpc("Operations", "Tenants", "tenants", True, "a read"),
    Rpc("Operations", "Workers", "workers", True, "a read"),
    Rpc("Operations", "Explain", "explain", True, "a read"),
    Rpc("Operations", "Splits", "splits", True, "a read"),
    Rpc("Operations", "PreemptionOrder", "preemption_order", True, "a read"),
    Rpc("Operations", "ReclamationOrder", "reclamation_order", True, "a read"),
    Rpc("Operations", "Reclaim", "reclaim", False,
        "settles whatever is idle when it runs: a second sending may reclaim claims the first did not"),
    Rpc("Operations", "Estimate", "estimate", True, "a read"),
    Rpc("Operations", "LedgerHead", "ledger_head", True, "a read"),
    Rpc("Operations", "LedgerExport", "ledger_export", True, "a read; resumed after the last receipt received"),
    Rpc("Operations", "RecordWitness", "record_witness", True, "one receipt per statement"),
    Rpc("Operations", "Cordon", "cordon", True, "cordoning a cordoned worker writes no receipt"),
)
BY_METHOD = {rpc.method: rpc for rpc in RPCS}
