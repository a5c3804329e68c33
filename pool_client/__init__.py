"""pool_client: Pool's client library (claims.proto and ops.proto), blocking
(`pool_client.Client`) and asyncio (`pool_client.aio.Client`).

    import pool_client
    with pool_client.Client.from_context() as pool:            # ~/.config/pool/config.toml
        print(pool.get(claim_id="c1").state)

It imports nothing of the scheduler's; `import pool_client` itself loads no
gRPC until a client, an error class or the failover rules are asked for, so a
command line can read its configuration (pool_client.config) cheaply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from pool_client.errors import OutcomeUnknown, PoolError, TransportError, Unreachable
    from pool_client.sync import Client

__all__ = ["Client", "PoolError", "TransportError", "OutcomeUnknown", "Unreachable", "errors", "config", "aio"]


def __getattr__(name: str) -> Any:
    if name == "Client":
        from pool_client.sync import Client
        return Client
    if name in ("PoolError", "TransportError", "OutcomeUnknown", "Unreachable"):
        from pool_client import errors
        return getattr(errors, name)
    if name in ("errors", "config", "aio", "failover", "calls", "diagnose"):
        import importlib
        return importlib.import_module(f"pool_client.{name}")
    raise AttributeError(f"module 'pool_client' has no attribute {name!r}")
