"""A window the scheduler keeps refusing becomes an explicit gap, so one bad
window cannot hold a host's evidence back for ever.

The scheduler refuses a batch whole at its earliest bad window and names that
window's seq N (INVALID_WINDOW, trailing metadata `pool-window-seq`,
protos/refusals.py). Then, on the agent's side:

1. the next session sends the windows below N on their own first (the spool
   cuts batches at N), so they are counted; then N again, once per session;
2. once the same N has been refused on `stream.refusals_before_gap`
   consecutive sessions, the spool replaces window N, durably, by a
   `GAP_REFUSED` gap with the same seq, device, span and grade, no figure and
   lost_windows 1 (Spool.refuse); one ERROR line says so with the
   scheduler's message, pool_agent_windows_refused_total counts it, and
   streaming goes on (a spool that cannot write the gap keeps the window,
   says so, and is asked again at the next refusal);
3. a gap is refused only for what it shares with its window (device, seq,
   span), which no replacement changes: a refused gap (the replacement, or a
   window that was a gap already) stays in the spool and is sent again after
   a growing backoff, each refusal logged as an ERROR. No seq is ever dropped.

"Consecutive": sessions that each ended with N refused. An acknowledgement at
or above N ends the streak (the scheduler counted N after all: a transient
refusal, and the window keeps its figure); a refusal naming another seq starts
a new streak; any other failure (UNAVAILABLE, NOT_LEADER, UNAUTHENTICATED, …)
neither counts nor ends it. The streak is kept in memory: a restarted agent
counts afresh, so it tries N at most `refusals_before_gap` more times.
"""

from __future__ import annotations

import logging

from agent.spool import Spool, SpoolError

log = logging.getLogger(__name__)


class Refusals:
    """The streak of sessions whose batch was refused at the same window."""

    def __init__(self, spool: Spool, limit: int) -> None:
        self._spool, self.limit = spool, limit
        self.seq: int | None = None   # the window the last sessions were refused at; None: no streak
        self.count = 0                # consecutive sessions refused at it

    def acked(self, seq: int) -> None:
        """The scheduler has counted every window up to `seq`."""
        if self.seq is not None and seq >= self.seq:
            self.seq, self.count = None, 0

    def refused(self, seq: int, message: str) -> bool:
        """A session ended with its batch refused at window `seq` (the
        scheduler's `message`): count it, and at the limit replace the window
        by a gap. True when `seq` starts a new streak."""
        new = seq != self.seq
        if new:
            self.seq, self.count = seq, 0
        self.count += 1
        if self.count < self.limit:
            log.warning("window seq %d refused (%d of %d consecutive sessions before it becomes a gap): %s",
                        seq, self.count, self.limit, message)
            return new
        try:
            gap = self._spool.refuse(seq)
        except SpoolError as exc:   # the stream goes on: the window stays as it was, and is tried again
            log.error("window seq %d was refused on %d consecutive sessions but could not be replaced by a gap "
                      "(%s): it is sent again; the scheduler said: %s", seq, self.count, exc, message)
            return new
        if gap is not None:
            log.error("window seq %d of %s (%d to %d ns) was refused on %d consecutive sessions: it is now a "
                      "GAP_REFUSED gap, its figure never counted; the scheduler said: %s",
                      seq, gap.device_id, gap.start_ns, gap.end_ns, self.count, message)
        else:
            log.error("window seq %d is a gap and is refused for its device, seq or span, which no replacement "
                      "changes: it stays in the spool and is sent again (refusal %d); the scheduler said: %s",
                      seq, self.count, message)
        return new
