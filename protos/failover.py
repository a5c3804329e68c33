"""Moved to pool_client/failover.py (the client library); the agent, the
scheduler's NOT_LEADER and protos/refusals.py import these names from here."""

from pool_client.failover import (LEADER_KEY, Targets, addresses, leader_hint,  # noqa: F401
                                  retryable, trailing)
