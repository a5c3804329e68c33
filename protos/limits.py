"""Limits of the wire contract that both the scheduler and its clients need
(each is also stated where the proto documents the call)."""

SUBMIT_MANY_MAX = 1000   # claims per Claims.SubmitMany call
# A gap's span allows one lost window per this many ns, and one more (Window.lost_windows): an
# agent cuts windows no shorter than its meters' ~100 ms update, and this leaves half of that spare
LOST_WINDOW_NS = 50_000_000
