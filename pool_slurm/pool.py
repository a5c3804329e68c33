"""Pool's side: the claims and operations calls the bridge and its hooks make,
through the client library (pool_client: failover to the leader a standby
names, resending where the outcomes table says it is safe, deadlines, one
error class per refusal code), over mutual TLS as the bridge's principal (an
operator). What is the bridge's own lives here: claims found by id prefix,
SubmitMany in chunks, Slurm's GPU indices turned into device ids, a claim's
energy as Splits reports it."""

from __future__ import annotations

from pool_client import Client
from pool_client.errors import BindConflict, ClaimNotOpen, PoolError, TransportError, UnknownClaim
from protos.energy import Grade, worst
from protos.pool.v1 import claims_pb2, ops_pb2, types_pb2

from pool_slurm.config import Config

__all__ = ["Pool", "PoolError", "unreachable"]

OPEN = (types_pb2.PENDING, types_pb2.ADMITTED)


def unreachable(exc: PoolError) -> bool:
    """Pool did not answer (no scheduler reached within the deadline, the connection lost):
    no refusal code of Pool's, so the bridge's fail-closed/fail-open policy applies."""
    return isinstance(exc, TransportError)


class Pool:
    def __init__(self, config: Config) -> None:
        self.config = config
        tls = {"ca": str(config.ca), "cert": str(config.cert), "key": str(config.key)} if config.ca else {}
        # timeout: reaching a scheduler at all; deadline: each call's whole budget, failovers included
        self.client = Client(config.scheduler, timeout=config.timeout_s, deadline=config.timeout_s, **tls)
        self.devices: dict[str, tuple[str, ...]] = {}   # worker -> GPU device ids, from the last Workers

    def close(self) -> None:
        self.client.close()

    def watch(self):
        """Every claim event from now on, for ever: the library watches again after a lost
        connection or a failover and resumes after the last event delivered."""
        return self.client.watch(claims_pb2.WatchRequest())

    def open_claims(self, prefix: str) -> list[claims_pb2.ClaimStatus]:
        return [c for c in self.client.list_all(claims_pb2.ListClaimsRequest(states=OPEN))
                if c.claim_id.startswith(prefix)]

    def submit_many(self, requests: list[claims_pb2.SubmitRequest]) -> list[claims_pb2.SubmitResult]:
        out = []
        for i in range(0, len(requests), 1000):
            out.extend(self.client.submit_many(claims_pb2.SubmitManyRequest(claims=requests[i:i + 1000])).results)
        return out

    def get(self, claim_id: str, tenant: str = "") -> claims_pb2.ClaimStatus | None:
        """The claim, None when unknown. `tenant`: the claim's, where known: claim ids are per
        tenant (docs/RULES.md §11) and the bridge, an operator, reaches every tenant, so an id
        another tenant also uses is AMBIGUOUS_CLAIM without it."""
        try:
            return self.client.get(claim_id=claim_id, tenant=tenant)
        except UnknownClaim:
            return None

    def release(self, claim_id: str, tenant: str = "") -> claims_pb2.ClaimStatus | None:
        """Release a claim: its released status (also when the bridge's own earlier Release
        ended it: a second sending is answered as the first); None when it was settled
        otherwise (CLAIM_NOT_OPEN) or is unknown. `tenant`: as get's."""
        try:
            return self.client.release(claim_id=claim_id, tenant=tenant)
        except (ClaimNotOpen, UnknownClaim):
            return None

    def bind(self, status: claims_pb2.ClaimStatus, indices: list[int]) -> claims_pb2.ClaimStatus:
        """Bind an admitted claim to the GPUs Slurm gave its job on its worker (RULES §10). Slurm's
        index i is the i-th device of `[devices.<worker>]` in the config, else the worker's i-th GPU
        in device id order (as Operations.Workers lists them; as the bridge's last cycle read them,
        which saves a call while a job's start waits on it)."""
        devices = self.config.devices.get(status.worker)
        if devices is None:
            devices = self.devices.get(status.worker)
            if devices is None or any(i >= len(devices) for i in indices):   # not read yet, or changed
                self.workers()
                devices = self.devices.get(status.worker, ())
        missing = [i for i in indices if i >= len(devices)]
        if missing:
            raise BindConflict(f"Slurm gave GPU index {missing[0]} on {status.worker!r}, which has "
                               f"{len(devices)} GPU(s) in Pool")
        return self.client.bind(claim_id=status.claim_id, tenant=status.tenant,
                                device_ids=[devices[i] for i in indices])

    def workers(self) -> list[ops_pb2.WorkerStatus]:
        workers = list(self.client.workers().workers)
        self.devices = {w.worker: tuple(g.device_id for g in w.gpus) for w in workers}
        return workers

    def claim_energy(self, status: claims_pb2.ClaimStatus) -> tuple[int, str, int]:
        """(µJ, grade name, unaccounted seconds) of one claim as Splits reports it: the sum of its rows,
        their worst grade, and the gap time on its devices while it was admitted."""
        since = max(status.admitted_ns - 1, 0)
        devices = set(status.devices_mdev)
        uj, grades, gaps, token = 0, [], [], ""
        while True:
            page = self.client.splits(tenant=status.tenant, since_ns=since, page_token=token)
            for row in page.rows:
                if row.claim_id == status.claim_id:
                    uj += row.uj
                    if row.grade:
                        grades.append(Grade(row.grade))
            gaps.extend(g for g in page.gaps if g.device_id in devices)
            token = page.next_page_token
            if not token:
                break
        end = status.ended_ns or (max((g.end_ns for g in gaps), default=status.admitted_ns))
        unaccounted = sum(max(0, min(g.end_ns, end) - max(g.start_ns, status.admitted_ns)) for g in gaps)
        grade = types_pb2.Grade.Name(int(worst(grades))) if grades else "GRADE_UNSPECIFIED"
        return uj, grade.removeprefix("GRADE_"), unaccounted // 1_000_000_000

    def counted_past(self, status: claims_pb2.ClaimStatus) -> bool:
        """Whether every device of an ended claim has a window (a split row) or a gap ending after the
        claim ended: an agent streams each device's windows in order, so nothing more of the claim's
        time is to come and its figure is final (docs/SLURM.md, "Joules on every job")."""
        if not status.ended_ns:   # still open: its figure can grow, and Splits since 0 would say nothing
            return False
        for device in status.devices_mdev:
            page = self.client.splits(since_ns=status.ended_ns, device_id=device, page_size=1)
            if not page.rows and not page.gaps:
                return False
        return True
