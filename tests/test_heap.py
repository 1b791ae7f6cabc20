"""The garbage collector's settings of runstream's processes (server/processes/heap.py)."""

from __future__ import annotations

import gc

from server.processes.heap import GEN0_THRESHOLD, settle_heap


def test_settle_heap_freezes_what_is_loaded_and_collects_the_young_less_often() -> None:
    before = gc.get_threshold()
    try:
        settle_heap()
        assert gc.get_freeze_count() > 10_000  # this process's modules, out of the scans
        assert gc.get_threshold() == (GEN0_THRESHOLD, *before[1:])
        kept: list[object] = []
        kept.append(kept)  # cyclic garbage made afterwards is still collected
        del kept
        assert gc.collect() >= 1
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
