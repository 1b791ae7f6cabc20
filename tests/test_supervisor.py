"""`runstream up`'s supervisor on its own, with real (short-lived) child processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

from server.processes.supervisor import Backoff, SupervisedChild, Supervisor, describe_exit

FAST = Backoff(first_s=0.05, max_s=0.2, healthy_after_s=60)


def exits_with(code: int) -> list[str]:
    return [sys.executable, "-c", f"raise SystemExit({code})"]


def stop_when(supervisor: Supervisor, done: threading.Event) -> threading.Thread:
    """Ask `supervisor` to stop once `done` is set (or after 30 s: a bound, not a pass)."""

    def wait() -> None:
        done.wait(30)
        supervisor.request_stop()

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


class TestSupervisor:
    def test_a_child_that_keeps_exiting_is_restarted_later_each_time(self) -> None:
        delays: list[float] = []
        enough = threading.Event()

        def launch() -> subprocess.Popen[bytes]:
            delays.append(child.delay_s)
            if len(delays) == 5:
                enough.set()
            return subprocess.Popen(exits_with(1))

        child = SupervisedChild("quitter", launch, stop_timeout_s=5)
        supervisor = Supervisor([[child]], FAST)
        supervisor.start()
        stop_when(supervisor, enough)
        assert supervisor.run() is None
        assert supervisor.stop() == 0
        assert delays[:5] == [0.0, 0.05, 0.1, 0.2, 0.2]  # the first start, then the backoff

    def test_a_child_whose_settings_do_not_hold_is_not_restarted(self) -> None:
        launches: list[subprocess.Popen[bytes]] = []

        def launch() -> subprocess.Popen[bytes]:
            launches.append(subprocess.Popen(exits_with(2)))
            return launches[-1]

        keeper = SupervisedChild(
            "keeper", lambda: subprocess.Popen(["sleep", "30"]), stop_timeout_s=5
        )
        supervisor = Supervisor([[keeper], [SupervisedChild("bad", launch, stop_timeout_s=5)]])
        supervisor.start()
        stop_when(supervisor, threading.Event())  # the 30 s bound only
        started = time.monotonic()
        assert supervisor.run() == 2
        assert time.monotonic() - started < 10
        assert supervisor.stop() == 0  # the others are stopped (SIGTERM is a clean stop)
        assert len(launches) == 1
        assert keeper.process is not None and keeper.process.returncode == -signal.SIGTERM

    def test_a_child_that_ignores_the_stop_signal_is_killed(self) -> None:
        stubborn = SupervisedChild(
            "stubborn",
            lambda: subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import signal, time; "
                    "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); "
                    "time.sleep(60)",
                ],
                stdout=subprocess.PIPE,
            ),
            stop_timeout_s=0.5,
        )
        supervisor = Supervisor([[stubborn]])
        supervisor.start()
        assert stubborn.process is not None and stubborn.process.stdout is not None
        stubborn.process.stdout.readline()  # its handler is in place
        assert supervisor.stop() == 1
        assert stubborn.process.returncode == -signal.SIGKILL

    def test_exits_read_as_an_operator_would(self) -> None:
        assert describe_exit(-signal.SIGKILL) == "signal SIGKILL"
        assert describe_exit(3) == "exit 3"
