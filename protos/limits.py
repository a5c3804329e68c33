"""Limits of the wire contract that both the scheduler and its clients need
(each is also stated where the proto documents the call)."""

SUBMIT_MANY_MAX = 1000   # claims per Claims.SubmitMany call
