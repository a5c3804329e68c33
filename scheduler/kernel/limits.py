"""The bounds on every field a client names (RULES §10: bad input changes
nothing). One home: the kernel's validation, the service's conversions and
the evidence rules all read them from here."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from protos.energy import UNALLOCATED

from .placement import check_worker
from .loads import WorkerLoad
from .snapshot import ClaimSpec, ClusterState, Worker

NAME_RULE = "[A-Za-z0-9._:-]{1,128}"            # claim, gang, work class, host and device ids
NAME = re.compile(NAME_RULE)
RESERVED = frozenset({UNALLOCATED})            # occupant names the scheduler itself uses
MAX_GPU_TYPES = 16                             # entries in a request's gpu_types
MAX_GPU_TYPE_CHARS = 64                        # characters in one GPU type name
MAX_GANG_SIZE = 10_000                         # members a gang may declare
MAX_DEVICES = 256                              # devices one host may register


def name_error(value: object) -> str | None:
    """Why `value` is not a valid id, or None."""
    if not isinstance(value, str) or not NAME.fullmatch(value):
        return f"must match {NAME_RULE}"
    if value in RESERVED:
        return f"{value!r} is reserved"
    return None


def own_name(key: str, tenant: str) -> str:
    """The id within a claim's or gang's key (docs/RULES.md §names): the key is
    `TENANT/ID` with the claim's own tenant, or (a ledger older than names per
    tenant) the id alone. Anything else is returned whole, and fails name_error."""
    prefix = tenant + "/"
    return key[len(prefix):] if key.startswith(prefix) else key


def fits_no_worker(workers: Iterable[Worker], spec: ClaimSpec) -> bool:
    """No worker could take the claim even empty, live and uncordoned (RULES §5's checks,
    placement.check_worker). Stops at the first that could: usually the first."""
    return not any(check_worker(replace(w, live=True, cordoned=False), WorkerLoad(device_used=(0,) * len(w.devices)), spec)[1]
                   is not None for w in workers)


def claim_never_fits(state: ClusterState, spec: ClaimSpec, hold_uj: int) -> tuple[str, str] | None:
    """(field, why) when a claim can never be admitted under this
    configuration: its hold or milli-devices above the root's guarantee.
    Refused at submission rather than left pending, since only a new
    configuration could admit it (docs/RULES.md). A claim larger than every
    registered worker is not refused: workers register, grow and come back,
    so it waits (NO_ELIGIBLE_WORKER) and explain shows each worker's shortfall."""
    root = state.tree.nodes[state.tree.root]
    if hold_uj > root.guarantee_uj:
        field = "estimate_uj" if spec.estimate_uj == hold_uj else "work_class"
        return field, f"its hold of {hold_uj} µJ is above the root's guarantee of {root.guarantee_uj} µJ"
    if spec.resources.gpu_mdev > root.guarantee_mdev:
        return "resources.gpu_mdev", (f"{spec.resources.gpu_mdev} mdev is above the root's guarantee of "
                                      f"{root.guarantee_mdev} mdev")
    return None
