"""What the sync and asyncio clients share: settings, credentials, channel
options, building a request from keywords, and Watch's resume bookkeeping."""

from __future__ import annotations

import os
import time
from typing import Any, NamedTuple

# Before grpc is first imported: gRPC core writes no log lines of its own to stderr
# (a client reports failures as exceptions), unless the user asked for them.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")
os.environ.setdefault("GRPC_TRACE", "")

import grpc  # noqa: E402

from pool_client import config as _config  # noqa: E402
from pool_client.calls import Rpc  # noqa: E402
from pool_client.diagnose import cause as _cause, permanent  # noqa: E402
from pool_client.errors import Unreachable, from_rpc_error  # noqa: E402
from pool_client.failover import Sent, Targets, addresses as _addresses, connect_failure, sent  # noqa: E402
from protos.pool.v1 import claims_pb2, ops_pb2  # noqa: E402

DEFAULT_DEADLINE_S = 30.0      # a call's whole budget, failovers included, unless timeout= says otherwise
KEEPALIVE_MS = 1_000           # ping an idle connection during a call this often ...
KEEPALIVE_TIMEOUT_MS = 2_000   # ... and give it up when a ping goes unanswered this long
TENANT_DEFAULTED = {"Submit", "List", "Watch", "Splits"}   # requests a context's tenant fills in ...
NESTED_SUBMITS = {"SubmitMany", "Plan"}                    # ... and the claims inside these

REQUESTS: dict[str, Any] = {
    "Submit": claims_pb2.SubmitRequest, "SubmitMany": claims_pb2.SubmitManyRequest,
    "Progress": claims_pb2.ProgressRequest, "Release": claims_pb2.ReleaseRequest,
    "Get": claims_pb2.GetClaimRequest, "List": claims_pb2.ListClaimsRequest,
    "Watch": claims_pb2.WatchRequest, "Plan": claims_pb2.PlanRequest, "Bind": claims_pb2.BindRequest,
    "Tenants": ops_pb2.TenantsRequest, "Workers": ops_pb2.WorkersRequest, "Explain": ops_pb2.ExplainRequest,
    "Splits": ops_pb2.SplitsRequest, "PreemptionOrder": ops_pb2.PreemptionOrderRequest,
    "ReclamationOrder": ops_pb2.ReclamationOrderRequest, "Reclaim": ops_pb2.ReclaimRequest,
    "Estimate": ops_pb2.EstimateRequest, "LedgerHead": ops_pb2.LedgerHeadRequest,
    "LedgerExport": ops_pb2.LedgerExportRequest, "RecordWitness": ops_pb2.RecordWitnessRequest,
    "Cordon": ops_pb2.CordonRequest,
}


class Settings(NamedTuple):
    addresses: list[str]
    credentials: grpc.ChannelCredentials | None
    tenant: str | None
    connect_timeout: float
    deadline: float
    options: tuple[tuple[str, Any], ...]
    tls: bool
    ca_path: str | None = None
    cert_path: str | None = None
    key_path: str | None = None

    @property
    def has_cert(self) -> bool:
        return self.cert_path is not None


def settings(scheduler: str | list[str], ca: str | None, cert: str | None, key: str | None, tenant: str | None,
             timeout: float | None, deadline: float | None, options: tuple = ()) -> Settings:
    """Check and gather a client's settings; ValueError says what is wrong."""
    listed = _addresses(scheduler)
    connect = _config.DEFAULT_TIMEOUT_S if timeout is None else float(timeout)
    if connect <= 0:
        raise ValueError("timeout must be > 0 seconds")
    return Settings(listed, credentials(ca, cert, key), tenant, connect,
                    DEFAULT_DEADLINE_S if deadline is None else float(deadline),
                    channel_options(connect) + tuple(options), bool(ca), ca or None, cert or None, key or None)


def credentials(ca: str | None, cert: str | None, key: str | None) -> grpc.ChannelCredentials | None:
    """mTLS channel credentials from PEM paths; None (plaintext) without a CA."""
    if not ca:
        if cert or key:
            raise ValueError("a client certificate and key need a CA too")
        return None
    if bool(cert) != bool(key):
        raise ValueError("a client certificate and its key go together")
    return grpc.ssl_channel_credentials(_read(ca), _read(key) if key else None, _read(cert) if cert else None)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as error:
        raise ValueError(f"{path}: {error.strerror}") from None


def channel_options(connect_timeout_s: float) -> tuple[tuple[str, Any], ...]:
    """Keepalive pings, so a frozen or vanished scheduler is noticed within
    KEEPALIVE_MS + KEEPALIVE_TIMEOUT_MS of silence during a call; a connection
    attempt (TCP and TLS handshake) given up after the connect timeout; and
    reconnection backoff kept short, so a scheduler back after a restart is
    reached within a second."""
    connect_ms = max(100, int(connect_timeout_s * 1000))
    # grpc core 1.85 gives up an unanswered ping after grpc.http2.ping_timeout_ms (default one
    # minute), whatever keepalive_timeout_ms says: both are set, to the same bound.
    return (("grpc.keepalive_time_ms", KEEPALIVE_MS), ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
            ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
            ("grpc.min_reconnect_backoff_ms", connect_ms), ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1_000), ("grpc.enable_retries", 0))


def request(rpc: Rpc, given: Any, fields: dict[str, Any], tenant: str | None) -> Any:
    """The request message: `given`, or one built from keyword fields; the context's
    tenant filled in where the request names none."""
    if given is None:
        given = REQUESTS[rpc.name](**fields)
    elif fields:
        raise TypeError(f"{rpc.method}: pass a request or keyword fields, not both")
    if tenant and rpc.name in NESTED_SUBMITS and any(not c.tenant for c in given.claims):
        given = _copy(given)
        for claim in given.claims:
            claim.tenant = claim.tenant or tenant
    elif tenant and rpc.name in TENANT_DEFAULTED:
        if rpc.name == "Watch":
            if given.WhichOneof("target") is None:
                given = _copy(given)
                given.tenant = tenant
        elif not given.tenant:
            given = _copy(given)
            given.tenant = tenant
    return given


def _copy(message: Any) -> Any:
    out = type(message)()
    out.CopyFrom(message)
    return out


RESUME_FROM_KEY = "pool-resume-from"   # WATCH_LAGGED's trailing metadata: the position to watch again from
CURRENT = claims_pb2.ClaimEventKind.Value("EVENT_CURRENT")


class Resume:
    """Watch's memory across reconnections. Once the statuses sent first are
    over (a live event has come), the watch is made again with resume_from =
    the last live event's position (WatchRequest.resume_from: only the claims
    changed since, then live events); before that, from the start. Either way
    an event is delivered only if its claim's ledger seq is newer than the
    last one delivered for that claim, so nothing is delivered twice."""

    def __init__(self, request: claims_pb2.WatchRequest) -> None:
        self.request = request
        self.position = 0
        self.seen: dict[str, int] = {}

    def fresh(self, event: claims_pb2.ClaimEvent) -> bool:
        if event.kind != CURRENT and event.position:
            self.position = max(self.position, event.position)
        claim, seq = event.status.claim_id, event.status.ledger_seq
        if seq and seq <= self.seen.get(claim, 0):
            return False
        self.seen[claim] = seq
        return True

    def lagged(self, position: str | None) -> None:
        """WATCH_LAGGED named where to watch again from."""
        if position and position.isdecimal():
            self.position = max(self.position, int(position))

    def again(self) -> claims_pb2.WatchRequest:
        """The request that resumes where this watch is."""
        if not self.position:
            return self.request
        resumed = _copy(self.request)
        resumed.resume_from = self.position
        return resumed


def context_values(name: str | None, overrides: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The scheduler address and keyword arguments of a client made from the
    configuration file's context `name`, keyword arguments overriding it."""
    context = _config.context(name)
    values = {"scheduler": context.scheduler, "ca": context.ca, "cert": context.cert, "key": context.key,
              "tenant": context.tenant, "timeout": context.timeout}
    values.update({k: v for k, v in overrides.items() if v is not None})
    if not values["scheduler"]:
        raise _config.ConfigError(f"context {context.name or '(none)'}: no scheduler address")
    return values.pop("scheduler"), values


class Reach:
    """What a client knows of reaching its schedulers, shared by the blocking and the
    asyncio client: which address to try (Targets), whether any scheduler has
    answered yet, and which addresses failed in a way no retry mends. The clients
    do the I/O and the waiting; every decision about a failed attempt is here."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.targets = Targets(settings.addresses)
        self.reached = False      # some scheduler has answered on this client
        self.broken: set[str] = set()   # addresses whose last failure was a TLS set-up no retry mends

    def answered(self) -> None:
        self.targets.succeeded()
        self.reached = True
        self.broken.clear()

    def give_up(self, error: grpc.RpcError, address: str, waited: float) -> None:
        """Raise Unreachable once no scheduler can be reached: the connect timeout
        passed without one answering, or every address failed in a way that trying
        again will not mend (TLS set up wrongly on one side)."""
        if not connect_failure(error):
            self.broken.clear()
            return
        if permanent(error):
            self.broken.add(address)
        else:
            self.broken.discard(address)
        if self.broken >= set(self.targets.addresses) or (not self.reached and waited >= self.settings.connect_timeout):
            raise Unreachable(_cause(error, address, self.settings), status=error.code()) from None

    def retry(self, error: grpc.RpcError, address: str, start: float, deadline: float,
              resends: bool, resent: bool) -> tuple[float, bool]:
        """After a failed unary attempt: raise what the caller gets, or return how long
        to wait before sending again and whether an unknown outcome has now been
        resent. `resends`: the call is safe to send again after an unknown outcome
        (calls.py); a call that never ran is always sent again."""
        kind = sent(error)
        if kind is Sent.ANSWERED:
            self.reached = True
            raise from_rpc_error(error) from None
        if kind is Sent.UNKNOWN and not resends:
            raise from_rpc_error(error, unknown=True) from None
        now = time.monotonic()
        self.give_up(error, address, now - start)
        if now >= deadline:
            raise from_rpc_error(error, unknown=resent or kind is Sent.UNKNOWN) from None
        return min(self.targets.failed(error), max(0.0, deadline - now)), resent or kind is Sent.UNKNOWN
