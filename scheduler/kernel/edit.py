"""Edit sessions (Clojure's transients): one batch of changes to persistent
structures, made in place where no other state can see it.

A persistent map or sequence copies what it changes. Under an `Edit`, each
copy is recorded as the batch's own, and later changes under the same Edit
write into it instead of copying it again. What existed before the batch is
shared with older states and is still copied, so the state a batch starts
from is never touched. The states *between* a batch's steps share its nodes
and are not valid once the next step runs: only the batch's last state is.
`schedule` runs its pass as one batch; trial states (preemption, gangs) are
made without an Edit.
"""

from __future__ import annotations

from typing import Any


class Edit:
    __slots__ = ("owned",)

    def __init__(self) -> None:
        # id -> node for every node made in this batch; holding the node keeps
        # its id from being reused by an unrelated object while the batch lives
        self.owned: dict[int, Any] = {}

    def own(self, node: Any) -> Any:
        self.owned[id(node)] = node
        return node
