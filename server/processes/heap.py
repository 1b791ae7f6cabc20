"""The garbage collector's settings of a runstream process: what start-up loaded is frozen out
of its sight, and the youngest generation is collected less often.

Python's collector scans a generation's objects whenever it runs, and a full collection scans
them all: the ~140k objects of the modules a worker or server loads, every time. A fast run
triggers full collections often (LangChain keeps every chunk of a reply until it is whole), and
in the worker they were about 45 of its ~100 µs of CPU per token (issue 12's profile).
`gc.freeze()` moves what exists at start-up to a generation the collector never scans; those
objects are still freed by their reference counts. Collecting first keeps start-up's cyclic
garbage from being frozen with them.
"""

from __future__ import annotations

import gc

__all__ = ["GEN0_THRESHOLD", "settle_heap"]

# Python's default is 700 allocations; a fast run reaches that every ~40 tokens. Only cyclic
# garbage waits longer: everything else is freed by its reference count as before.
GEN0_THRESHOLD = 10_000


def settle_heap() -> None:
    """Call once start-up is done, before serving."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, older, oldest)
