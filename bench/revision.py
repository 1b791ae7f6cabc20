"""Another revision of runstream, checked out beside this tree, for `--against REV`.

`git worktree add --detach` makes a temporary checkout of REV from this repository; a
`Cluster` with that checkout as its `root` runs REV's server and worker on the same venv (their
working directory and `PYTHONPATH` point there), so a scenario can measure this tree and REV in
the same invocation, on the same machine load. The checkout is removed afterwards.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .launcher import ROOT

__all__ = ["RevisionError", "checkout", "resolve"]


class RevisionError(RuntimeError):
    """REV is not a commit of this repository, or its checkout failed."""


def _git(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        stderr = getattr(exc, "stderr", "") or str(exc)
        raise RevisionError(f"git {' '.join(args)}: {stderr.strip()}") from exc
    return done.stdout.strip()


def resolve(rev: str) -> str:
    """REV's full commit id; RevisionError if this repository has no such commit."""
    return _git("rev-parse", "--verify", "--end-of-options", f"{rev}^{{commit}}")


@contextlib.contextmanager
def checkout(rev: str) -> Iterator[Path]:
    """A detached checkout of REV in a temporary folder, removed (with its worktree entry)
    when the block ends."""
    commit = resolve(rev)
    folder = Path(tempfile.mkdtemp(prefix="rs-bench-rev-")) / commit[:12]
    _git("worktree", "add", "--detach", str(folder), commit)
    try:
        yield folder
    finally:
        with contextlib.suppress(RevisionError):
            _git("worktree", "remove", "--force", str(folder))
        with contextlib.suppress(OSError):
            folder.parent.rmdir()
