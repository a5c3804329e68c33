"""What every client of a highly available Pool shares (this library, poolctl,
pool-agent): a list of scheduler addresses, the leader hint a standby sends
with NOT_LEADER, which failures mean "not sent, try another one", which mean
"sent, outcome unknown", and where to try next.

A standby refuses with UNAVAILABLE, `NOT_LEADER: …`, and the leader's
advertised address in the trailing metadata key LEADER_KEY; one still
replaying says NOT_READY; a stopping one refuses a new call with SHUTTING_DOWN
("… did nothing with this call …"); a scheduler that is down refuses the
connection.
None of these ran the call, so it is always sent again: to the hinted leader
at once, else to the next address after a backoff with jitter. A call that was
sent and got no answer (UNAVAILABLE after sending, LEDGER_UNAVAILABLE,
SHUTTING_DOWN cutting it short, DEADLINE_EXCEEDED, a CANCELLED the caller did not ask for) may
have taken effect: it is sent again only when the RPC is safe to resend
(pool_client/calls.py, docs/USER-GUIDE.md "Sending again").
"""

from __future__ import annotations

from enum import Enum

import grpc

from pool_client.errors import LEADER_KEY, pool_code, trailing

__all__ = ["LEADER_KEY", "DEFAULT_PORT", "addresses", "leader_hint", "trailing", "retryable", "Sent",
           "sent", "Targets"]

DEFAULT_PORT = 7070
NOT_RUN = frozenset({"NOT_LEADER", "NOT_READY"})   # refused before the handler ran


def addresses(text: str | list[str] | tuple[str, ...]) -> list[str]:
    """"a:7070, b:7070" -> ["a:7070", "b:7070"]: the form of --scheduler,
    POOL_SCHEDULER, a context's `scheduler` and agent.toml's `scheduler`.
    An address without a port gets DEFAULT_PORT (7070), as the scheduler listens."""
    parts = text.split(",") if isinstance(text, str) else list(text)
    found = [with_port(part.strip()) for part in parts if part.strip()]
    if not found:
        raise ValueError("no scheduler address")
    return found


def with_port(address: str) -> str:
    """host -> host:7070; [::1] -> [::1]:7070; host:port and unix: targets as given."""
    if address.startswith(("unix:", "unix-abstract:", "dns:", "ipv4:", "ipv6:")):
        return address
    if address.startswith("["):
        return address if "]:" in address else f"{address}:{DEFAULT_PORT}"
    if address.count(":") == 1:
        host, port = address.rsplit(":", 1)
        if not port.isdecimal():
            raise ValueError(f"{address!r}: the port must be a number")
        return address
    if address.count(":") > 1:   # a bare IPv6 address
        return f"[{address}]:{DEFAULT_PORT}"
    return f"{address}:{DEFAULT_PORT}"


def leader_hint(error: grpc.RpcError) -> str | None:
    """The leader a standby named, if this error is a NOT_LEADER with a hint."""
    return trailing(error, LEADER_KEY)


def retryable(error: grpc.RpcError) -> bool:
    """UNAVAILABLE: no scheduler there, a standby, one replaying, or stepping down.
    (The agent's stream resends its windows by seq, so each of these is safe for it.)"""
    return error.code() == grpc.StatusCode.UNAVAILABLE


class Sent(Enum):
    NOT_SENT = "not sent"        # never ran: always safe to send again
    UNKNOWN = "unknown"          # sent, no answer: safe to send again only where the RPC says so
    ANSWERED = "answered"        # the scheduler's answer: the caller's


CONNECT_FAILED = ("failed to connect to all addresses", "Connection refused", "connections to all backends failing",
                  "DNS resolution failed", "Name resolution failure", "Empty update", "Ssl handshake failed",
                  "Handshake failed", "handshake", "Connection reset by peer")


def connect_failure(error: grpc.RpcError) -> bool:
    """UNAVAILABLE raised before the call reached a scheduler: no connection could be made."""
    details = error.details() or ""
    return (error.code() == grpc.StatusCode.UNAVAILABLE and pool_code(error)[0] is None
            and any(mark in details for mark in CONNECT_FAILED))


def sent(error: grpc.RpcError, cancelled_by_caller: bool = False) -> Sent:
    """Whether a failed call may have taken effect."""
    status = error.code()
    code, _ = pool_code(error)
    if status == grpc.StatusCode.UNAVAILABLE:
        if code in NOT_RUN or (code is None and connect_failure(error)) or \
                (code == "SHUTTING_DOWN" and "did nothing with this call" in (error.details() or "")):
            return Sent.NOT_SENT
        return Sent.UNKNOWN        # LEDGER_UNAVAILABLE, SHUTTING_DOWN, a connection lost mid-call
    if status == grpc.StatusCode.DEADLINE_EXCEEDED and code is None:
        return Sent.UNKNOWN
    if status == grpc.StatusCode.CANCELLED and code is None and not cancelled_by_caller:
        return Sent.UNKNOWN
    return Sent.ANSWERED


class Targets:
    """Which address to use next: the hinted leader, else the next in the list,
    with exponential backoff and jitter once every address has been tried."""

    def __init__(self, addresses: list[str], initial_s: float = 0.05, cap_s: float = 1.0) -> None:
        self.addresses = list(addresses)
        self.current = self.addresses[0]
        self._initial, self._cap = initial_s, cap_s
        self._misses = 0

    def failed(self, error: grpc.RpcError | None) -> float:
        """Move on after a failure; the seconds to wait before the next try."""
        hint = leader_hint(error) if error is not None else None
        self._misses += 1
        if hint and hint != self.current:
            if hint not in self.addresses:
                self.addresses.append(hint)
            self.current = hint
            return 0.0
        self.current = self.addresses[(self.addresses.index(self.current) + 1) % len(self.addresses)]
        return 0.0 if self._misses < len(self.addresses) else self._delay()

    def succeeded(self) -> None:
        self._misses = 0

    def _delay(self) -> float:
        import random   # here, not at the top: only a retry that waits needs it (poolctl's start-up)
        rounds = self._misses // len(self.addresses)
        return min(self._cap, self._initial * 2 ** rounds) * random.uniform(0.5, 1.0)
