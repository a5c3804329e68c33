"""A batch of windows from the wire to the ledger, in one folder.

    ../agents.py (the stream)   reads a WindowBatch message, flow control
    batch.py                    batch_columns: the message -> `WireWindows`, the body's columns
    evidence.py                 the door, `admit`: order, the new windows (kernel.counted), every rule
      columns.py                  what the rules derive from a batch     (speed, beside its plain twin)
      splits_held.py              the occupancy rule over whole columns (speed, beside the plain rule)
      occupancy.py                who occupies what, and the versions sent to each host
    window_body.py              the body in det-CBOR's normal form, sized  (speed, beside steward.prepare)
    ../engine.py                queued to the ledger, and folded once:
    ../state.py                 the service's one pure fold: `metered` (projections.py) gives the
                                kernel's Metered event for the new windows
    projections.py              fed beside it: split rows, gaps and observations, each a named
                                record with its receipt's seq, read below the committed length
      floors.py                   each device's idle floor, and busy windows below it (noticing)

A window is counted once: the kernel's rule (`kernel.fresh`, by the host's
counted seq `kernel.counted`) is asked by the door, the fold and the kernel's
own metering transition, and nowhere else.
"""
