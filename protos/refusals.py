"""What a refused window batch tells the agent, for both sides of the stream.

The scheduler refuses a batch whole with INVALID_WINDOW, naming its earliest
bad window in the message ("window seq N from 'HOST': RULE"), and N is also
the trailing metadata value WINDOW_SEQ_KEY, in decimal (types.proto,
ErrorCode.INVALID_WINDOW), so the agent can tell which window it is without
parsing the sentence: it sends the windows below N on its own, and after
`stream.refusals_before_gap` consecutive refusals of N replaces N by a
GAP_REFUSED gap (agent/stream.py).
"""

from __future__ import annotations

import grpc

from protos.failover import trailing

WINDOW_SEQ_KEY = "pool-window-seq"
CODE = "INVALID_WINDOW"


def window_seq_metadata(seq: int) -> tuple[tuple[str, str], ...]:
    """The trailing metadata of a batch refused at window `seq`."""
    return ((WINDOW_SEQ_KEY, str(seq)),)


def refused_seq(error: grpc.RpcError) -> int | None:
    """The window seq an INVALID_WINDOW refusal names in its trailing metadata;
    None for every other failure (another code, or no seq given)."""
    if error.code() != grpc.StatusCode.INVALID_ARGUMENT or not (error.details() or "").startswith(f"{CODE}:"):
        return None
    value = trailing(error, WINDOW_SEQ_KEY)
    return int(value) if value is not None and value.isdecimal() else None
