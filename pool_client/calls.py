"""Every RPC of claims.proto and ops.proto the library offers, and whether a
call that was sent and got no answer (an unknown outcome) is sent again.

RESEND is the one home of that rule; docs/USER-GUIDE.md ("Sending again")
prints it as a table and tests/client/test_docs.py checks the two agree.
A call that never ran (no connection, NOT_LEADER, NOT_READY, SHUTTING_DOWN
refusing it on arrival) is always sent again, whatever this table says. What
the scheduler does with a second sending is docs/USER-GUIDE.md's "When a call
fails" (the outcomes' side of this table).
"""

from __future__ import annotations

from typing import NamedTuple


class Rpc(NamedTuple):
    service: str        # "Claims" or "Operations"
    name: str           # the RPC's name in the .proto
    method: str         # the library's method name
    resend: str         # an unknown outcome is sent again: "yes", "no", or "with claim_ids" (only when named)
    why: str            # what makes a second sending safe, or why it is not sent again

    def resends(self, request: object) -> bool:
        """Whether this request is sent again after an unknown outcome."""
        if self.resend == "with claim_ids":
            return bool(getattr(request, "claim_ids", None))
        return self.resend == "yes"


RPCS: tuple[Rpc, ...] = (
    Rpc("Claims", "Submit", "submit", "yes", "an identical request is answered as the first one was"),
    Rpc("Claims", "SubmitMany", "submit_many", "yes", "an identical request is answered as the first one was"),
    Rpc("Claims", "Progress", "progress", "yes", "completed_units is cumulative: the same count again changes nothing"),
    Rpc("Claims", "Release", "release", "yes",
        "a second Release by the principal whose Release ended the claim answers the released status"),
    Rpc("Claims", "Get", "get", "yes", "a read"),
    Rpc("Claims", "List", "list", "yes", "a read"),
    Rpc("Claims", "Watch", "watch", "yes", "a read; resumed after the last event seen"),
    Rpc("Claims", "Plan", "plan", "yes", "a dry run, no state change"),
    Rpc("Claims", "Bind", "bind", "yes", "binding a bound claim to the devices it has records nothing"),
    Rpc("Operations", "Tenants", "tenants", "yes", "a read"),
    Rpc("Operations", "Workers", "workers", "yes", "a read"),
    Rpc("Operations", "Explain", "explain", "yes", "a read"),
    Rpc("Operations", "Splits", "splits", "yes", "a read"),
    Rpc("Operations", "PreemptionOrder", "preemption_order", "yes", "a read"),
    Rpc("Operations", "ReclamationOrder", "reclamation_order", "yes", "a read"),
    Rpc("Operations", "Reclaim", "reclaim", "with claim_ids",
        "a named claim already RECLAIMED is not settled again; without claim_ids it settles whatever is idle "
        "when it runs, so a second sending may reclaim claims the first did not"),
    Rpc("Operations", "Estimate", "estimate", "yes", "a read"),
    Rpc("Operations", "LedgerHead", "ledger_head", "yes", "a read"),
    Rpc("Operations", "LedgerExport", "ledger_export", "yes", "a read; resumed after the last receipt received"),
    Rpc("Operations", "RecordWitness", "record_witness", "yes", "one receipt per statement"),
    Rpc("Operations", "Cordon", "cordon", "yes", "cordoning a cordoned worker writes no receipt"),
)
BY_METHOD = {rpc.method: rpc for rpc in RPCS}
