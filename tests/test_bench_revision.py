"""`bench --against REV`'s checkout: REV's own files, detached, gone afterwards."""

from __future__ import annotations

import subprocess

import pytest

from bench import revision
from bench.launcher import ROOT


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_revision_that_is_no_commit_is_refused_by_name() -> None:
    with pytest.raises(revision.RevisionError, match="no-such-revision"):
        revision.resolve("no-such-revision")


def test_the_checkout_is_the_revision_detached_and_removed_afterwards() -> None:
    commit = _git("rev-parse", "HEAD~1")
    with revision.checkout("HEAD~1") as folder:
        assert _git("-C", str(folder), "rev-parse", "HEAD") == commit
        assert _git("-C", str(folder), "status", "--porcelain") == ""
        assert (folder / "server" / "processes" / "cli.py").is_file()
        assert str(folder) in _git("worktree", "list")
    assert not folder.exists()
    assert str(folder) not in _git("worktree", "list")
