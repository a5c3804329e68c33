"""Moved to pool_client/channel.py (the client library)."""

from pool_client.channel import DEADLINE_S, FailoverChannel  # noqa: F401
