"""Start-up's replay runs with the collector paused (service/main.py
collector_paused): off while the ledger replays, what it built frozen out of
later scans, and the collector left as it was found, also when replay fails."""

from __future__ import annotations

import contextlib
import gc

import pytest

from scheduler.service.main import collector_paused


@pytest.fixture
def collector():
    enabled = gc.isenabled()
    yield
    gc.unfreeze()   # (back into the oldest generation: later tests' collections see them again)
    gc.enable() if enabled else gc.disable()


@pytest.mark.parametrize("failing", [False, True])
def test_the_collector_is_off_during_replay_and_on_again_after(collector, failing):
    gc.enable()
    built = None
    with pytest.raises(RuntimeError) if failing else contextlib.nullcontext():
        with collector_paused():
            assert not gc.isenabled()
            built = [[i] for i in range(1000)]   # long-lived state, as a replay builds
            if failing:
                raise RuntimeError("the ledger does not verify")
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(built), "what the replay built is out of the collector's scans"


def test_a_collector_switched_off_before_stays_off(collector):
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()

