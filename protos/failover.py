"""What every client of a highly available Pool shares (poolctl, the Python
client path, pool-agent): a list of scheduler addresses, the leader hint a
standby sends with NOT_LEADER, and which failures mean "try another one".

A standby refuses with UNAVAILABLE, `NOT_LEADER: …`, and the leader's
advertised address in the trailing metadata key LEADER_KEY. A dead or
restarting scheduler is UNAVAILABLE too (connection refused), and one still
replaying says NOT_READY. Each of these changed nothing, so the call is sent
again: to the hinted leader at once, else to the next address after a backoff.
"""

from __future__ import annotations

import random

import grpc

LEADER_KEY = "pool-leader"


def addresses(text: str) -> list[str]:
    """"a:7070, b:7070" -> ["a:7070", "b:7070"]: the form of --scheduler,
    POOL_SCHEDULER and agent.toml's `scheduler`."""
    found = [part.strip() for part in text.split(",") if part.strip()]
    if not found:
        raise ValueError("no scheduler address")
    return found


def leader_hint(error: grpc.RpcError) -> str | None:
    """The leader a standby named, if this error is a NOT_LEADER with a hint."""
    return trailing(error, LEADER_KEY)


def trailing(error: grpc.RpcError, name: str) -> str | None:
    """The value of trailing metadata key `name` a failed call carried, if any."""
    try:
        metadata = error.trailing_metadata() or ()
    except Exception:   # an error raised before any call was made has no metadata
        return None
    return next((value for key, value in metadata if key == name), None)


def retryable(error: grpc.RpcError) -> bool:
    """UNAVAILABLE: no scheduler there, a standby, one replaying, or a failed
    append — in each case nothing was changed and the call can be sent again."""
    return error.code() == grpc.StatusCode.UNAVAILABLE


class Targets:
    """Which address to use next: the hinted leader, else the next in the list,
    with exponential backoff and jitter once every address has been tried."""

    def __init__(self, addresses: list[str], initial_s: float = 0.1, cap_s: float = 2.0) -> None:
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
        else:
            self.current = self.addresses[(self.addresses.index(self.current) + 1) % len(self.addresses)]
        return 0.0 if self._misses < len(self.addresses) else self._delay()

    def succeeded(self) -> None:
        self._misses = 0

    def _delay(self) -> float:
        rounds = self._misses // len(self.addresses)
        return min(self._cap, self._initial * 2 ** rounds) * random.uniform(0.5, 1.0)
