"""The kernel's machinery: how the rules are made cheap, kept apart from the
rules themselves (the modules one level up, one per section of RULES.md).

Each piece here stands beside a plain twin it is tested equal to
(tests/kernel):

| module | what | its plain twin |
|---|---|---|
| pmap.py | persistent hash map | a dict copied on change (test_invariants, test_edit) |
| sortedseq.py | persistent sorted sequence | a sorted list (test_invariants, test_edit) |
| freeindex.py | live workers by best-fit key, with block ceilings | a linear best fit (test_freeindex, test_reference) |
| edit.py | edit batches: in-place changes to what a batch made | copying on every change (test_edit, test_invariants) |
| shapes.py | pending claims by shape and by size | judging every pending claim (test_incremental) |
| movable.py | the shapes a state could admit, found through the index | `Room.could_admit` over every shape (test_incremental) |
| rollup.py | the roll-up's path update, in place within a batch | `rollup.rollup` from scratch (test_rollup) |
| ranks.py | each tenant's admitted claims by (priority, id): the lowest priority, the claims below one | a walk of the claims (test_invariants) |
| held.py | a worker's open claim ids (`WorkerLoad.active`): a tuple while few, else a `sortedseq.Shared`, never changed in place | a sorted tuple, `loads.load_of` from scratch (test_loads) |
| devices.py | whether a worker has the devices, without picking them | `placement.pick_devices(...) is not None` (test_placement) |
| members.py | enum members the hot paths read, bound to names once | the members themselves |
| records.py | fast constructors and `_replace` for NamedTuple records | the record's own constructor and typing's `_replace` (test_records) |
"""
