"""The one authorization table: for every RPC, the roles that may call it and
how far a tenant's or an agent's reach goes. One interceptor (`Authorizer`)
puts every call through it before any handler runs; no handler checks who is
calling.

A call is answered in this order (docs/OPERATIONS.md, "Security"):

1. authenticate: the client certificate's subject CN names a declared
   principal (`NO_CLIENT_CERTIFICATE`, `UNKNOWN_PRINCIPAL`: UNAUTHENTICATED).
   In `[server] insecure = true` mode every caller is `INSECURE`, an operator
   that may call every RPC (agents included: development has no identities);
2. the caller's role is in the RPC's row (`ROLE_NOT_ALLOWED`: PERMISSION_DENIED);
   and the call fits the caller's budget and its role's pool (limits.Admission:
   `PRINCIPAL_LIMIT`, `SERVICE_BUSY`: RESOURCE_EXHAUSTED), and, for a row that
   `writes`, the caller's receipts per hour;
3. the row's scope, for the role it binds, checks the request — for a
   client-streaming RPC, its first message — and may narrow it: a tenant reads
   its own subtrees when it names none (`OUT_OF_SCOPE`: PERMISSION_DENIED);
4. the handler runs with `principal.caller()` set to the caller, so the
   receipts it makes name their actor; a row's `reply` narrows the answer.

Scopes need the replayed state; until replay is done every handler answers
NOT_READY anyway, so a scope is skipped then (never a reason to let a call
change anything: nothing is served before replay).

ADDING AN RPC: add one row to TABLE, e.g.
    "/pool.v1.Claims/SubmitMany": rule(ACTORS, each_spec("claims"), writes=True),
    "/pool.v1.Operations/Cordon": rule("operator", writes=True),
An RPC without a row is refused for everyone (ROLE_NOT_ALLOWED), and
tests/e2e/test_authz.py fails until the row exists.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
import unicodedata
from dataclasses import dataclass
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple

import grpc
from cryptography import x509
from cryptography.x509.oid import NameOID
from google.protobuf.message import Message

from protos.pool.v1 import ops_pb2
from scheduler.kernel import ClusterState
from scheduler.service.config import HEALTH_BUDGET
from scheduler.service.errors import Refused
from scheduler.service.names import resolve
from scheduler.service.limits import Admission
from scheduler.service.principal import INSECURE, Principal, in_reach, set_caller

ANYONE = "*"   # a row for any caller the TLS layer let in (health probes), principal or not


class Scope(NamedTuple):
    """A reach rule for one role: `narrow(principal, message, state)` returns the
    message, narrowed where the caller named nothing, or raises OUT_OF_SCOPE."""

    binds: str    # the role it applies to ("tenant" or "agent"); other roles reach everything
    narrow: Callable[[Principal, Any, ClusterState], Any]
    says: str     # the rule in words, for docs and the proto comments


class Rule(NamedTuple):
    roles: frozenset[str]
    scope: Scope | None = None
    reply: Scope | None = None   # narrows the answer (its `narrow` gets the response)
    writes: bool = False         # may cause receipts: refused while the caller's receipt budget is spent


def rule(roles: str, scope: Scope | None = None, reply: Scope | None = None, writes: bool = False) -> Rule:
    return Rule(frozenset(roles.split()), scope, reply, writes)


# -- scopes --------------------------------------------------------------------

def _out_of_scope(principal: Principal, what: str) -> Refused:
    return Refused("OUT_OF_SCOPE", f"{principal.name} may act only in {', '.join(principal.tenants)}: {what}")


def tenant_field(name: str) -> Scope:
    """request.<name> must be a tenant node in the caller's subtrees."""
    def narrow(principal: Principal, request: Any, state: ClusterState) -> Any:
        tenant = getattr(request, name)
        if not in_reach(principal, state, tenant):
            raise _out_of_scope(principal, f"{name} {tenant!r}")
        return request
    return Scope("tenant", narrow, f"{name} in the caller's subtrees")


def tenant_filter(name: str) -> Scope:
    """An optional filter request.<name>: in the caller's subtrees; when empty,
    narrowed to the caller's one subtree (refused when it has several)."""
    def narrow(principal: Principal, request: Any, state: ClusterState) -> Any:
        if getattr(request, name):
            return tenant_field(name).narrow(principal, request, state)
        if len(principal.tenants) != 1:
            raise _out_of_scope(principal, f"name one of them in {name}")
        narrowed = type(request)()
        narrowed.CopyFrom(request)
        setattr(narrowed, name, principal.tenants[0])
        return narrowed
    return Scope("tenant", narrow, f"{name} in the caller's subtrees; empty: the caller's one subtree")


def claim_field(name: str, tenant: str = "tenant") -> Scope:
    """The claim named by request.<name> (with request.<tenant>) is found among
    the caller's subtrees' claims (names.resolve: docs/RULES.md §names). Another
    tenant's claim is not among them, so it is answered exactly as an unknown
    id is (UNKNOWN_CLAIM, "no claim 'ID'"): a tenant cannot learn which ids
    others use, and its own ids never meet theirs."""
    def narrow(principal: Principal, request: Any, state: ClusterState) -> Any:
        resolve(state, getattr(request, name), getattr(request, tenant), principal)
        return request
    return Scope("tenant", narrow, f"the claim named by {name} is in the caller's subtrees (another's: as unknown)")


def held_claim(name: str, tenant: str = "tenant") -> Scope:
    """The claim named by request.<name> (with request.<tenant>) is one the
    scheduler holds, in the caller's subtrees: a claim compacted away (or
    never submitted) has no tenant left to check against, so a tenant cannot
    name it."""
    def narrow(principal: Principal, request: Any, state: ClusterState) -> Any:
        try:
            resolve(state, getattr(request, name), getattr(request, tenant), principal)
        except Refused as refusal:   # another's: as one not held
            if refusal.code != "UNKNOWN_CLAIM":
                raise
            raise _out_of_scope(principal, f"claim {getattr(request, name)!r} is not one the scheduler holds") \
                from None
        return request
    return Scope("tenant", narrow, f"the claim named by {name} is one the scheduler holds, in the caller's subtrees")


def each_spec(name: str) -> Scope:
    """Every spec in the repeated request.<name> has a tenant in the caller's subtrees."""
    def narrow(principal: Principal, request: Any, state: ClusterState) -> Any:
        checked: set[str] = set()   # each tenant once: a Plan of 1,000 specs of one tenant is one check
        for spec in getattr(request, name):
            if spec.tenant not in checked:
                tenant_field("tenant").narrow(principal, spec, state)
                checked.add(spec.tenant)
        return request
    return Scope("tenant", narrow, f"the tenant of every spec in {name} is in the caller's subtrees")


def watch_target(principal: Principal, request: Any, state: ClusterState) -> Any:
    if request.WhichOneof("target") == "claim_id":
        return claim_field("claim_id", "claim_tenant").narrow(principal, request, state)
    return tenant_filter("tenant").narrow(principal, request, state)


def host_field(name: str) -> Scope:
    """An agent acts only as the host whose id is its certificate's CN."""
    def narrow(principal: Principal, message: Any, state: ClusterState) -> Any:
        host = getattr(message, name)
        if host != principal.name:
            raise Refused("OUT_OF_SCOPE", f"agent {principal.name!r} may act only as host {principal.name!r}, "
                                          f"not {host!r}")
        return message
    return Scope("agent", narrow, f"{name} equals the caller's CN")


def _hello_host(principal: Principal, message: Any, state: ClusterState) -> Any:
    """A stream that does not open with a Hello is the handler's to refuse (UNREGISTERED_AGENT)."""
    if message.WhichOneof("body") == "hello":
        host_field("host_id").narrow(principal, message.hello, state)
    return message


def _own_nodes(principal: Principal, response: Any, state: ClusterState) -> Any:
    return ops_pb2.TenantsResponse(
        tenants=[n for n in response.tenants if in_reach(principal, state, n.name)],
        period_start_ns=response.period_start_ns, period_ns=response.period_ns)


def _usable_workers(principal: Principal, response: Any, state: ClusterState) -> Any:
    """A tenant's Explain shows the workers its claim could use, not the fleet:
    the rows that pass, the others counted in workers_omitted."""
    narrowed = type(response)()
    narrowed.CopyFrom(response)
    kept = [w for w in response.workers if w.ok]
    del narrowed.workers[:]
    narrowed.workers.extend(kept)
    narrowed.workers_omitted += len(response.workers) - len(kept)
    return narrowed


HELLO_HOST = Scope("agent", _hello_host, "the first message's Hello host_id equals the caller's CN")
WATCH_TARGET = Scope("tenant", watch_target, "the watched claim or tenant is in the caller's subtrees; "
                                             "no target: the caller's one subtree")
OWN_NODES = Scope("tenant", _own_nodes, "only the nodes of the caller's subtrees")
USABLE_WORKERS = Scope("tenant", _usable_workers, "only the worker rows its claim could use")

# -- the table -----------------------------------------------------------------

ACTORS = "tenant operator"             # change claims
READERS = "tenant operator auditor"    # read claims and figures (a tenant: its own)
AUDIT = "operator auditor"             # cluster-wide views
LEDGER = "operator auditor witness"    # a witness reads what it signs

TABLE: Mapping[str, Rule] = {
    "/pool.v1.Claims/Submit": rule(ACTORS, tenant_field("tenant"), writes=True),
    "/pool.v1.Claims/SubmitMany": rule(ACTORS, each_spec("claims"), writes=True),
    "/pool.v1.Claims/Progress": rule(ACTORS, claim_field("claim_id"), writes=True),
    "/pool.v1.Claims/Release": rule(ACTORS, claim_field("claim_id"), writes=True),
    "/pool.v1.Claims/Get": rule(READERS, claim_field("claim_id")),
    "/pool.v1.Claims/List": rule(READERS, tenant_filter("tenant")),
    "/pool.v1.Claims/Watch": rule(READERS, WATCH_TARGET),
    "/pool.v1.Claims/Plan": rule(ACTORS, each_spec("claims")),
    "/pool.v1.Claims/Bind": rule("operator", writes=True),
    "/pool.v1.Operations/Tenants": rule(READERS, reply=OWN_NODES),
    "/pool.v1.Operations/Workers": rule(AUDIT),
    "/pool.v1.Operations/Explain": rule(READERS, claim_field("claim_id"), reply=USABLE_WORKERS),
    "/pool.v1.Operations/Splits": rule(READERS, tenant_filter("tenant")),
    "/pool.v1.Operations/PreemptionOrder": rule(AUDIT),
    "/pool.v1.Operations/ReclamationOrder": rule(AUDIT),
    "/pool.v1.Operations/Reclaim": rule("operator", writes=True),
    "/pool.v1.Operations/Estimate": rule(READERS),
    "/pool.v1.Operations/LedgerHead": rule(LEDGER),
    "/pool.v1.Operations/LedgerExport": rule(LEDGER),
    "/pool.v1.Operations/RecordWitness": rule("witness", writes=True),
    "/pool.v1.Operations/Cordon": rule("operator", writes=True),
    "/pool.v1.Proofs/GetCheckpoint": rule(READERS + " witness"),
    "/pool.v1.Proofs/AddCosignature": rule("witness", writes=True),
    "/pool.v1.Proofs/ProveClaim": rule(READERS, held_claim("claim_id")),
    "/pool.v1.Proofs/ProveSubtree": rule(READERS, tenant_filter("tenant")),
    "/pool.v1.AgentService/Register": rule("agent", host_field("host_id"), writes=True),
    "/pool.v1.AgentService/Stream": rule("agent", HELLO_HOST),
    "/grpc.health.v1.Health/Check": rule(ANYONE),
    "/grpc.health.v1.Health/Watch": rule(ANYONE),
    "/grpc.health.v1.Health/List": rule(ANYONE),
}
CLOSED = Rule(frozenset())   # a method without a row: nobody


# -- the door ------------------------------------------------------------------

@functools.lru_cache(maxsize=4096)
def certificate_name(pem: bytes) -> str | None:
    """The one subject CN of a certificate, as it is (gRPC's x509_common_name stops at a NUL:
    `ta\\0ops` read as `ta`); None when there is not exactly one, or it holds a control character."""
    try:
        names = x509.load_pem_x509_certificate(pem).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    except ValueError:
        return None
    if len(names) != 1 or not isinstance(names[0].value, str):
        return None
    name = names[0].value
    return None if any(unicodedata.category(c) == "Cc" for c in name) else name


@dataclass(eq=False)   # each one itself, in Authorizer.streams
class OpenStream:
    """A streaming call in progress, as it was admitted: judged again on reload."""

    principal: Principal
    method: str
    rule: Rule
    message: Any                  # the request, or the stream's first message
    task: asyncio.Task            # the call's own task: cancelled to end it where it waits
    revoked: Refused | None = None   # set to the refusal that ends the call
    waiting: bool = False         # in the handler, for its next message (not being sent one)

class Authorizer(grpc.aio.ServerInterceptor):
    """Puts every call through TABLE. `principals` is replaced whole on reload."""

    def __init__(self, principals: Mapping[str, Principal], *, insecure: bool,
                 state: Callable[[], ClusterState | None], on_refused: Callable[[str], None],
                 admission: Admission | None = None) -> None:
        self.principals, self.insecure = principals, insecure
        self._state, self._on_refused = state, on_refused
        self.admission = admission if admission is not None else Admission({})
        self.streams: set[OpenStream] = set()

    @staticmethod
    def common_name(context: grpc.aio.ServicerContext) -> str | None:
        """The certificate's CN; "" for one that names no principal (several CNs, a control
        character, a CN gRPC reads otherwise than the certificate says)."""
        auth = context.auth_context() or {}
        names = auth.get("x509_common_name") or ()
        if not names:
            return None
        name = names[0].decode(errors="replace")
        pem = (auth.get("x509_pem_cert") or (b"",))[0]
        return name if certificate_name(pem) == name else ""

    def authenticate(self, context: grpc.aio.ServicerContext) -> Principal:
        if self.insecure:
            return INSECURE
        name = self.common_name(context)
        if name is None:
            raise Refused("NO_CLIENT_CERTIFICATE", "this scheduler identifies callers by their client "
                                                   "certificate; the call came without one")
        if not name:
            raise Refused("UNKNOWN_PRINCIPAL", "the certificate's subject has not exactly one CN free of "
                                               "control characters: it names no principal")
        return self.known(name)

    def known(self, name: str) -> Principal:
        principal = self.principals.get(name)
        if principal is None:
            raise Refused("UNKNOWN_PRINCIPAL", f"{name!r} is not a declared principal ([principals.{name}])")
        return principal

    def allowed(self, method: str, rule: Rule, principal: Principal) -> Principal:
        if principal.role not in rule.roles and principal is not INSECURE:
            allowed = ", ".join(sorted(rule.roles)) or "nobody"
            raise Refused("ROLE_NOT_ALLOWED", f"{principal.name} has role {principal.role}; "
                                              f"{method} is for: {allowed}")
        return principal

    def authorize(self, method: str, rule: Rule, context: grpc.aio.ServicerContext) -> Principal | None:
        """Steps 1 and 2: the caller, allowed by its role (None for an ANYONE row)."""
        if ANYONE in rule.roles:
            return None
        return self.allowed(method, rule, self.authenticate(context))

    def revise(self, principals: Mapping[str, Principal]) -> None:
        """Reload: the new principals, and every open stream judged again as
        its next call would be; one that would be refused ends now with that
        refusal (the call's wrapper, `_until_revoked`, ends it)."""
        self.principals = principals
        for call in list(self.streams):
            if call.revoked is not None or call.principal is INSECURE:
                continue
            try:
                principal = self.allowed(call.method, call.rule, self.known(call.principal.name))
                self.narrow(call.rule.scope, principal, call.message)
            except Refused as error:
                call.revoked = error
                if call.waiting:   # else it ends before its next message (_until_revoked)
                    call.task.cancel()

    def enter(self, principal: Principal | None, rule: Rule, context: grpc.aio.ServicerContext,
              streaming: bool) -> tuple[str, str, bool]:
        """Step 2's budgets: count the call in; what `leave` takes to count it out.
        A health call counts against its certificate's CN (declared or not), in
        the health pool."""
        if principal is None:
            key, role, budget = f"health:{self.common_name(context) or ''}", "health", HEALTH_BUDGET
        else:
            key, role, budget = principal.name, principal.role, principal.budget
        self.admission.enter(key, role, budget, streaming)
        ticket = (key, role, streaming)
        if principal is not None and rule.writes:
            try:
                self.admission.check_receipts(principal, time.monotonic())
            except Refused:
                self.leave(ticket)
                raise
        return ticket

    def leave(self, ticket: tuple[str, str, bool]) -> None:
        self.admission.leave(*ticket)

    def narrow(self, scope: Scope | None, principal: Principal | None, message: Any) -> Any:
        """Step 3 (and the reply of step 4)."""
        state = self._state()
        if scope is None or principal is None or principal.role != scope.binds or state is None or message is None:
            return message
        return scope.narrow(principal, message, state)

    async def refuse(self, context: grpc.aio.ServicerContext, error: Refused) -> None:
        self._on_refused(error.code)
        if error.metadata:
            context.set_trailing_metadata(error.metadata)
        await context.abort(error.status, str(error))

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        return _WRAPPERS[handler.request_streaming, handler.response_streaming](
            self, details.method, TABLE.get(details.method, CLOSED), handler)


async def _admit(door: Authorizer, method: str, rule: Rule, context: grpc.aio.ServicerContext,
                 read: Callable[[], Awaitable[Any]], streaming: bool = False
                 ) -> tuple[Principal | None, Any, tuple[str, str, bool]]:
    """Steps 1 to 3 for one call, then the caller set for the rest of it (each
    call runs in a task of its own, so the setting ends with the call); or the
    call ends here, refused. `read` gives the message the scope judges: the
    request, or a stream's first message (read only once the caller is known).
    The ticket returned is counted in (door.enter): the caller leaves it."""
    try:
        principal = door.authorize(method, rule, context)
        ticket = door.enter(principal, rule, context, streaming)
    except Refused as error:
        await door.refuse(context, error)
    if principal is not None:
        try:
            await door.admission.paced(principal)   # its calls_per_s: a call past it waits, before it is read
        except BaseException:
            door.leave(ticket)
            raise
    try:
        message = door.narrow(rule.scope, principal, well_formed(await read(), method))
    except Refused as error:
        door.leave(ticket)
        await door.refuse(context, error)
    except BaseException:
        door.leave(ticket)
        raise
    if principal is not None:
        set_caller(principal)
    return principal, message, ticket


def _unary_unary(door: Authorizer, method: str, rule: Rule, handler: Any) -> Any:
    async def call(request: Message, context: grpc.aio.ServicerContext) -> Any:
        principal, request, ticket = await _admit(door, method, rule, context, _given(request))
        try:
            async with door.admission.turn(principal):   # one principal's share of the event loop's turns
                response = await handler.unary_unary(request, context)
        finally:
            door.leave(ticket)
        return door.narrow(rule.reply, principal, response)
    return grpc.unary_unary_rpc_method_handler(call, _tolerant(handler.request_deserializer), handler.response_serializer)


async def _until_revoked(door: Authorizer, context: grpc.aio.ServicerContext, principal: Principal | None,
                         method: str, rule: Rule, message: Any, responses: Any) -> Any:
    """A stream's responses until it ends, or until a reload revokes what let
    it in (door.revise): then it ends with the refusal its next call would get.
    A reload that finds the call waiting in the handler for its next message
    cancels the call's task there (as drain.py's close does), and the
    cancellation is answered with the refusal; one that finds grpc sending a
    message ends the call before the next. Nothing is made per message."""
    if inspect.isawaitable(responses):   # a handler that writes with context.write (grpc's health Watch)
        await responses
        return
    if principal is None:   # health: nothing to revoke
        async for response in responses:
            yield response
        return
    task = asyncio.current_task()
    assert task is not None
    call = OpenStream(principal, method, rule, message, task)
    door.streams.add(call)
    responses = aiter(responses)
    try:
        while True:
            if call.revoked is not None:   # revoked while grpc was sending the last message
                await door.refuse(context, call.revoked)
            call.waiting = True
            try:
                response = await anext(responses)
            except StopAsyncIteration:
                return
            finally:
                call.waiting = False
            yield response
    except asyncio.CancelledError:
        if call.revoked is None:   # grpc's own cancellation, or drain.py's close
            raise
        await door.refuse(context, call.revoked)
    finally:
        door.streams.discard(call)
        await responses.aclose()


def _unary_stream(door: Authorizer, method: str, rule: Rule, handler: Any) -> Any:
    async def call(request: Message, context: grpc.aio.ServicerContext) -> Any:
        principal, request, ticket = await _admit(door, method, rule, context, _given(request), streaming=True)
        try:
            async for response in _until_revoked(door, context, principal, method, rule, request,
                                                 handler.unary_stream(request, context)):
                yield response
        finally:
            door.leave(ticket)
    return grpc.unary_stream_rpc_method_handler(call, _tolerant(handler.request_deserializer), handler.response_serializer)


def _stream_stream(door: Authorizer, method: str, rule: Rule, handler: Any) -> Any:
    async def call(requests: Any, context: grpc.aio.ServicerContext) -> Any:
        principal, first, ticket = await _admit(door, method, rule, context, lambda: anext(aiter(requests), None),
                                                streaming=True)
        try:
            async for response in _until_revoked(door, context, principal, method, rule, first,
                                                 handler.stream_stream(_resumed(first, requests, method), context)):
                yield response
        finally:
            door.leave(ticket)
    return grpc.stream_stream_rpc_method_handler(call, _tolerant(handler.request_deserializer), handler.response_serializer)


def _stream_unary(door: Authorizer, method: str, rule: Rule, handler: Any) -> Any:
    async def call(requests: Any, context: grpc.aio.ServicerContext) -> Any:
        _, first, ticket = await _admit(door, method, rule, context, lambda: anext(aiter(requests), None),
                                        streaming=True)
        try:
            return await handler.stream_unary(_resumed(first, requests, method), context)
        finally:
            door.leave(ticket)
    return grpc.stream_unary_rpc_method_handler(call, _tolerant(handler.request_deserializer), handler.response_serializer)


def _given(message: Any) -> Callable[[], Awaitable[Any]]:
    async def read() -> Any:
        return message
    return read


async def _resumed(first: Any, rest: Any, method: str) -> Any:
    """The request stream with its first message, already read, put back;
    a later message that does not decode ends it INVALID_ARGUMENT (Refused)."""
    if first is None:
        return
    yield first
    async for message in rest:
        yield well_formed(message, method)


class Malformed(NamedTuple):
    """A request whose bytes do not decode (truncated, too deeply nested, bad
    UTF-8): gRPC would answer UNKNOWN; the door answers INVALID_ARGUMENT."""
    reason: str


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def read(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:  # noqa: BLE001 - any decode failure is the caller's malformed request
            return Malformed(f"{type(exc).__name__}: {exc}")
    return read


def well_formed(message: Any, method: str) -> Any:
    if isinstance(message, Malformed):
        raise Refused("INVALID_ARGUMENT", f"request: not a well-formed message for {method} ({message.reason})")
    return message


_WRAPPERS = {(False, False): _unary_unary, (False, True): _unary_stream,
             (True, True): _stream_stream, (True, False): _stream_unary}


# -- the table in words: docs/OPERATIONS.md and the proto comments print these --

def roles_text(rule: Rule) -> str:
    return "anyone the TLS layer admits" if ANYONE in rule.roles else ", ".join(sorted(rule.roles))


def scope_text(rule: Rule) -> str:
    return "; ".join(f"{s.binds}: {s.says}" for s in (rule.scope, rule.reply) if s is not None) or "none"


def proto_comment(method: str) -> str:
    """The comment line above each pool.v1 rpc (tests/e2e/test_authz.py checks them)."""
    rule = TABLE[method]
    return f"// Callers: {roles_text(rule)}. Scope: {scope_text(rule)}."


def markdown() -> str:
    """The table as docs/OPERATIONS.md prints it."""
    rows = ["| RPC | roles | scope (for the role named) |", "|---|---|---|"]
    rows += [f"| `{m.lstrip('/')}` | {roles_text(r)} | {scope_text(r)} |" for m, r in TABLE.items()]
    return "\n".join(rows)
