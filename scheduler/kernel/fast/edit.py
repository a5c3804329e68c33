"""Edit sessions (Clojure's transients): one batch of changes to persistent
structures, made in place where no other state can see it.

A persistent map or sequence copies what it changes. Under an `Edit`, each
copy is recorded as the batch's own, and later changes under the same Edit
write into it instead of copying it again. What existed before the batch is
shared with older states and is still copied, so the state a batch starts
from is never touched. The states *between* a batch's steps share its nodes
and are not valid once the next step runs: only the batch's last state is.
The kernel opens its batches itself: a `transitions.Batch` is one, open
only while it applies an event. A decision is one such batch
(schedule.py); evaluation and the trial states of preemption and gangs run
outside it, so they copy as always. `with Edit():` also opens one, for a
caller's own persistent maps (the service's receipt tables).

The batch is found by the structures themselves (`current()`, a context
variable), never passed through the rules: `apply` and its handlers read as
if every change copied, and the one speed trick lives in pmap.py,
sortedseq.py, freeindex.py and rollup.py (its lists and their records), all in fast/.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

# The batch open here: `OPEN.set(edit)` opens one (returning the token that
# `OPEN.reset` closes it with; `with edit:` does both), `current()` is it or
# None, read by every persistent-structure change
OPEN: ContextVar[Edit | None] = ContextVar("pool_edit_batch", default=None)
current = OPEN.get


class Edit:
    __slots__ = ("owned", "_token")

    def __init__(self) -> None:
        # id -> node for every node made in this batch; holding the node keeps
        # its id from being reused by an unrelated object while the batch lives
        self.owned: dict[int, Any] = {}

    def own(self, node: Any) -> Any:
        self.owned[id(node)] = node
        return node

    def __enter__(self) -> Edit:
        self._token = OPEN.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        OPEN.reset(self._token)
