"""`--processes N`: N copies of `runstream serve` or `runstream worker` under one parent.

The children are started with multiprocessing's `spawn` (a fresh interpreter each: no event
loop, connection or thread is inherited half-made). Servers share one listening socket the
parent binds, as uvicorn's own `--workers` does: N servers answer on one port and the kernel
gives each connection to one of them. Workers share nothing but Redis and Postgres, like
workers on different hosts.

The parent forwards SIGTERM and SIGINT to every child as SIGTERM, on which each shuts down as
it would alone (a server ends its SSE responses, a worker hands its runs back), and waits for
them. A child that exits on its own stops the others and the parent: a deployment one process
short is better restarted whole by whatever supervises it (systemd, Kubernetes, `runstream up`'s
`server/processes/supervisor.py`).
A child whose parent died (SIGKILL) stops itself the same way.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.process import BaseProcess
from typing import Any

import structlog

from stream_store.settings import SettingsError

__all__ = ["bound_socket", "inherited_socket", "listening_socket", "run_processes"]

logger = structlog.get_logger()

_POLL_S = 0.2


def listening_socket(host: str, port: int) -> socket.socket:
    """The one socket every server child accepts on (bound here, listened on by the children)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def bound_socket(host: str, port: int) -> socket.socket:
    """`listening_socket`, or a clear refusal when another process holds the address."""
    try:
        return listening_socket(host, port)
    except OSError as exc:
        raise SettingsError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def inherited_socket(fd: int) -> socket.socket:
    """The socket a starter handed down as file descriptor `fd` (`serve --fd`)."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise SettingsError(f"--fd {fd}: not an open socket ({exc.strerror})") from None
    if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
        sock.close()
        raise SettingsError(f"--fd {fd}: not a TCP socket")
    sock.set_inheritable(True)
    return sock


def run_processes(
    kind: str,
    target: Callable[..., Any],
    args_of_child: Sequence[tuple[Any, ...]],
    *,
    stop_timeout_s: float,
) -> int:
    """Run `target(*args)` in one spawned child per entry of `args_of_child` until a signal
    or a child's exit; returns the highest exit code (1 when a child exited on its own or was
    killed). `target` and its arguments must pickle (module-level functions, plain data)."""
    context = multiprocessing.get_context("spawn")
    children = [
        context.Process(target=_child, args=(target, args), name=f"runstream-{kind}-{index}")
        for index, args in enumerate(args_of_child)
    ]
    stopping = threading.Event()

    def stop(signum: int, frame: object) -> None:
        stopping.set()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    failed = False
    try:
        for child in children:
            child.start()
        logger.info(f"{kind} processes started", pids=[c.pid for c in children])
        while not stopping.is_set():
            exited = [c for c in children if c.exitcode is not None]
            if exited:
                failed = True
                logger.error(
                    f"a {kind} process exited; stopping the others",
                    pid=exited[0].pid,
                    exit_code=exited[0].exitcode,
                )
                break
            stopping.wait(_POLL_S)
        _stop_all(children, stop_timeout_s)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    logger.info(f"{kind} processes stopped", exit_codes=[c.exitcode for c in children])
    return max([*(_exit_code(c.exitcode) for c in children), 1 if failed else 0])


def _exit_code(code: int | None) -> int:
    """A child's exit code as ours: ended by the SIGTERM we sent is a clean stop (uvicorn
    re-raises the signal once it has shut down gracefully), by any other signal a failure."""
    if code in (-signal.SIGTERM, -signal.SIGINT):
        return 0
    return 1 if code is None or code < 0 else code


def _child(target: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """A child's main: `target(*args)`, stopped (SIGTERM to itself) if the parent dies, so a
    killed parent leaves no process behind."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_stop_with, args=(parent.sentinel,), daemon=True).start()
    target(*args)


def _stop_with(sentinel: int) -> None:
    multiprocessing.connection.wait([sentinel])
    os.kill(os.getpid(), signal.SIGTERM)


def _stop_all(children: Sequence[BaseProcess], timeout_s: float) -> None:
    """SIGTERM every child still running, wait up to `timeout_s` in all, then SIGKILL."""
    for child in children:
        if child.exitcode is None:
            child.terminate()  # SIGTERM: the child's own graceful shutdown
    deadline = time.monotonic() + timeout_s
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
    for child in children:
        if child.exitcode is None:
            logger.warning("process did not stop in time; killing it", pid=child.pid)
            child.kill()
            child.join()
