"""Pool's side: the claims and operations calls the bridge and its hooks make,
over mutual TLS as the bridge's principal (an operator). One home for the
wire, so the switch to pool_client is one file."""

from __future__ import annotations

import grpc

from protos.energy import Grade, worst
from protos.pool.v1 import claims_pb2, claims_pb2_grpc, ops_pb2, ops_pb2_grpc, types_pb2

from pool_slurm.config import Config

OPEN = (types_pb2.PENDING, types_pb2.ADMITTED)


class PoolError(RuntimeError):
    """A call Pool refused (code: its stable error code) or could not be reached (code UNREACHABLE)."""

    def __init__(self, code: str, text: str) -> None:
        super().__init__(f"{code}: {text}")
        self.code = code


def _error(exc: grpc.RpcError) -> PoolError:
    details = exc.details() or ""
    if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return PoolError("UNREACHABLE", f"{exc.code().name}: {details}")
    code, _, text = details.partition(": ")
    return PoolError(code if code.isupper() else exc.code().name, text or details)


class Pool:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.timeout = config.timeout_s
        if config.ca is None:
            self.channel = grpc.insecure_channel(config.scheduler)
        else:
            credentials = grpc.ssl_channel_credentials(config.ca.read_bytes(), config.key.read_bytes(),
                                                       config.cert.read_bytes())
            self.channel = grpc.secure_channel(config.scheduler, credentials)
        self.claims = claims_pb2_grpc.ClaimsStub(self.channel)
        self.ops = ops_pb2_grpc.OperationsStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def _call(self, method, request):
        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise _error(exc) from None

    def watch(self):
        """Every claim event from now on (a stream; ends with the connection)."""
        return self.claims.Watch(claims_pb2.WatchRequest())

    def open_claims(self, prefix: str) -> list[claims_pb2.ClaimStatus]:
        out, token = [], ""
        while True:
            page = self._call(self.claims.List, claims_pb2.ListClaimsRequest(states=OPEN, page_token=token))
            out.extend(c for c in page.claims if c.claim_id.startswith(prefix))
            token = page.next_page_token
            if not token:
                return out

    def submit_many(self, requests: list[claims_pb2.SubmitRequest]) -> list[claims_pb2.SubmitResult]:
        out = []
        for i in range(0, len(requests), 1000):
            out.extend(self._call(self.claims.SubmitMany,
                                  claims_pb2.SubmitManyRequest(claims=requests[i:i + 1000])).results)
        return out

    def get(self, claim_id: str) -> claims_pb2.ClaimStatus | None:
        try:
            return self._call(self.claims.Get, claims_pb2.GetClaimRequest(claim_id=claim_id))
        except PoolError as exc:
            if exc.code == "UNKNOWN_CLAIM":
                return None
            raise

    def release(self, claim_id: str) -> claims_pb2.ClaimStatus | None:
        """Release an open claim; None when it was no longer open (or unknown)."""
        try:
            return self._call(self.claims.Release, claims_pb2.ReleaseRequest(claim_id=claim_id))
        except PoolError as exc:
            if exc.code in ("CLAIM_NOT_OPEN", "UNKNOWN_CLAIM"):
                return None
            raise

    def bind(self, status: claims_pb2.ClaimStatus, indices: list[int]) -> claims_pb2.ClaimStatus:
        """Bind an admitted claim to the GPUs Slurm gave its job on its worker (RULES §10). Slurm's
        index i is the i-th device of `[devices.<worker>]` in the config, else the worker's i-th GPU
        in device id order (as Operations.Workers lists them)."""
        devices = self.config.devices.get(status.worker)
        if devices is None:
            worker = next((w for w in self.workers() if w.worker == status.worker), None)
            devices = tuple(g.device_id for g in worker.gpus) if worker is not None else ()
        missing = [i for i in indices if i >= len(devices)]
        if missing:
            raise PoolError("BIND_CONFLICT", f"Slurm gave GPU index {missing[0]} on {status.worker!r}, which "
                                             f"has {len(devices)} GPU(s) in Pool")
        request = claims_pb2.BindRequest(claim_id=status.claim_id, device_ids=[devices[i] for i in indices])
        return self._call(self.claims.Bind, request)

    def workers(self) -> list[ops_pb2.WorkerStatus]:
        return list(self._call(self.ops.Workers, ops_pb2.WorkersRequest()).workers)

    def claim_energy(self, status: claims_pb2.ClaimStatus) -> tuple[int, str, int]:
        """(µJ, grade name, unaccounted seconds) of one claim as Splits reports it: the sum of its rows,
        their worst grade, and the gap time on its devices while it was admitted."""
        since = max(status.admitted_ns - 1, 0)
        devices = set(status.devices_mdev)
        uj, grades, gaps, token, first = 0, [], [], "", True
        while True:
            page = self._call(self.ops.Splits, ops_pb2.SplitsRequest(tenant=status.tenant, since_ns=since,
                                                                     page_token=token))
            for row in page.rows:
                if row.claim_id == status.claim_id:
                    uj += row.uj
                    if row.grade:
                        grades.append(Grade(row.grade))
            gaps.extend(g for g in page.gaps if g.device_id in devices)
            token = page.next_page_token
            first = False
            if not token:
                break
        end = status.ended_ns or (max((g.end_ns for g in gaps), default=status.admitted_ns))
        unaccounted = sum(max(0, min(g.end_ns, end) - max(g.start_ns, status.admitted_ns)) for g in gaps)
        grade = types_pb2.Grade.Name(int(worst(grades))) if grades else "GRADE_UNSPECIFIED"
        return uj, grade.removeprefix("GRADE_"), unaccounted // 1_000_000_000
