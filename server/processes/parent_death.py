"""Children of `runstream up` that stop when `up` dies, even of SIGKILL, when it cannot stop them.

Linux's parent-death signal (`prctl(PR_SET_PDEATHSIG)`), set in the child between fork and exec:
the kernel sends the child that signal when its parent exits, so a killed `up` leaves no server,
worker, Valkey or Postgres behind holding the port and the data folder. Elsewhere it is a no-op.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable

__all__ = ["signal_when_parent_dies"]

_PR_SET_PDEATHSIG = 1


def signal_when_parent_dies(signum: int) -> Callable[[], None] | None:
    """A `preexec_fn` for `subprocess.Popen` that has the child sent `signum` when this process
    dies; None where the kernel has no such signal. Runs after Popen's `user=`, so a change of
    user (which clears the setting) does not undo it. `up` starts children from its one thread,
    as `preexec_fn` requires."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)  # loaded here, not in the forked child

    def set_in_child() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the setting took
            os.kill(os.getpid(), signum)

    return set_in_child
