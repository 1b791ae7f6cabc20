"""`runstream up`'s children kept running: one that exits while `up` is not stopping is started
again, after a delay that doubles on each quick exit, so a child that dies at once does not
spin. Only a signal to `up` (Ctrl-C, SIGTERM) stops them, in layers: the children that depend
on others first (server and worker before the embedded Valkey and Postgres they use).

A child that exits with status 2 is not restarted: its settings do not hold (`runstream`'s exit
status for that), and starting it again would fail the same way.

Written here rather than taken from PyPI: the supervisors there (supervisor, circus) are
daemons with their own configuration files and control sockets, not a loop inside one command.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

__all__ = ["Backoff", "SupervisedChild", "Supervisor", "describe_exit"]

logger = structlog.get_logger()

SETTINGS_DO_NOT_HOLD = 2  # `runstream`'s exit status for settings that do not hold
_POLL_S = 0.2


@dataclass(frozen=True)
class Backoff:
    """The delays between restarts of one child: `first_s`, doubled on each exit up to
    `max_s`, back to `first_s` once the child had stayed up `healthy_after_s`."""

    first_s: float = 0.5
    max_s: float = 30.0
    healthy_after_s: float = 60.0


def describe_exit(code: int) -> str:
    """A return code as an operator reads it: `exit 1`, or `signal SIGKILL`."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit {code}"


class SupervisedChild:
    """One child process, how to start it again, and how to stop it."""

    def __init__(
        self,
        name: str,
        launch: Callable[[], subprocess.Popen[bytes]],
        *,
        stop_signal: int = signal.SIGTERM,
        stop_timeout_s: float,
        process: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.name = name
        self.launch = launch
        self.stop_signal = stop_signal
        self.stop_timeout_s = stop_timeout_s
        self.process = process  # None until started; the exited one while a restart waits
        self.started_at = time.monotonic()
        self.delay_s = 0.0  # the delay the last restart waited
        self.restart_at: float | None = None  # set while a restart waits

    def start(self) -> None:
        self.process = self.launch()
        self.started_at = time.monotonic()
        self.restart_at = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Supervisor:
    """Runs `layers` of children, each layer depending on the ones before it."""

    def __init__(
        self, layers: Sequence[Sequence[SupervisedChild]], backoff: Backoff = Backoff()
    ) -> None:
        self.layers = layers
        self.backoff = backoff
        self.stopping = False  # a plain flag: set from a signal handler, where no lock is safe

    def request_stop(self, signum: int = 0, frame: object = None) -> None:
        """The handler of SIGINT and SIGTERM while `run` supervises."""
        self.stopping = True

    def start(self) -> None:
        """Start every child not started yet (a layer may arrive already running)."""
        for layer in self.layers:
            for child in layer:
                if child.process is None:
                    child.start()

    def run(self) -> int | None:
        """Restart children that exit until a stop is requested; None then, or 2 when a
        child's settings do not hold (the caller stops the rest)."""
        while not self.stopping:
            time.sleep(_POLL_S)
            now = time.monotonic()
            for child in (c for layer in self.layers for c in layer):
                if self.stopping:  # children that got the same Ctrl-C exit too: no restart
                    return None
                if child.restart_at is not None:
                    if now >= child.restart_at:
                        child.start()
                        assert child.process is not None
                        logger.info("restarted", child=child.name, pid=child.process.pid)
                    continue
                code = child.process.poll() if child.process is not None else None
                if code is None:
                    continue
                if code == SETTINGS_DO_NOT_HOLD:
                    logger.error("exited: its settings do not hold; stopping", child=child.name)
                    return SETTINGS_DO_NOT_HOLD
                self._schedule_restart(child, code, now)
        return None

    def _schedule_restart(self, child: SupervisedChild, code: int, now: float) -> None:
        stayed_up_s = now - child.started_at
        if stayed_up_s >= self.backoff.healthy_after_s or child.delay_s == 0:
            child.delay_s = self.backoff.first_s
        else:
            child.delay_s = min(child.delay_s * 2, self.backoff.max_s)
        child.restart_at = now + child.delay_s
        logger.warning(
            "exited unexpectedly; restarting",
            child=child.name,
            pid=child.process.pid if child.process is not None else None,
            why=describe_exit(code),
            stayed_up_s=round(stayed_up_s, 1),
            restart_in_s=child.delay_s,
        )

    def stop(self) -> int:
        """Stop the children, last layer first, each layer's together; 1 if one had to be
        killed or failed on the way down, else 0."""
        logger.info("stopping", children=[c.name for layer in self.layers for c in layer])
        failed = False
        for layer in reversed(self.layers):
            running = [c for c in layer if c.running]
            for child in running:
                assert child.process is not None
                child.process.send_signal(child.stop_signal)
            started = time.monotonic()
            for child in running:
                assert child.process is not None
                left_s = child.stop_timeout_s - (time.monotonic() - started)
                try:
                    code = child.process.wait(max(0.0, left_s))
                except subprocess.TimeoutExpired:
                    logger.warning("did not stop in time; killing it", child=child.name)
                    child.process.kill()
                    child.process.wait()
                    failed = True
                    continue
                if code not in (0, -signal.SIGTERM, -signal.SIGINT):
                    logger.warning(
                        "stopped with a failure", child=child.name, why=describe_exit(code)
                    )
                    failed = True
        return 1 if failed else 0
