"""Operators' maintenance of workers: cordon and uncordon (RULES §5 as
extended in docs/OPERATIONS.md). A cordoned worker takes no new claim; the
claims it holds run on until they are released. Draining is cordoning and
then waiting: nothing is preempted for maintenance."""

from __future__ import annotations

from .events import WorkerCordoned
from .reasons import ErrorCode, KernelError
from .snapshot import ClusterState


def cordon(state: ClusterState, worker_id: str, cordoned: bool = True) -> WorkerCordoned | None | KernelError:
    """The event that (un)cordons a worker; None when it already is as asked
    (nothing to record); or why not."""
    worker = state.workers.get(worker_id)
    if worker is None:
        return KernelError(ErrorCode.UNKNOWN_WORKER, "worker", f"no worker {worker_id!r} has registered")
    if worker.cordoned == cordoned:
        return None
    return WorkerCordoned(worker_id, cordoned)
