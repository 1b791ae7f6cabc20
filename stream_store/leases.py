"""The leases of a worker's running attempts, renewed from a thread of their own.

A graph's node that blocks the event loop (a synchronous import, `requests`, loading a
tokenizer in an async node) used to stop the renewals with it: past the lease the run was taken
over and run again by another worker, though this one was alive and would have finished. The
keeper renews every held lease every third of the lease from its own thread, with a synchronous
client, in one pipeline (one round trip per tick for all of a worker's runs), so the loop's
pauses cost nothing while the process lives; a process that dies stops renewing, and its runs
are taken over as before.

What it does not renew through: a loop that has not turned for `STALLED_LOOP_S` (a deadlock, a
node stuck in C code). Then the keeper lets every lease lapse, so those runs go to other
workers instead of waiting on this one forever.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog
from redis import Redis as SyncRedis
from redis import RedisCluster as SyncRedisCluster
from redis.exceptions import NoScriptError, RedisError

from .errors import Fenced, StoreUnavailable, StreamGone, from_redis
from .keys import KeySpace
from .log import lua_source

__all__ = ["STALLED_LOOP_S", "LeaseKeeper"]

logger = structlog.get_logger()

STALLED_LOOP_S = 300.0

_RENEW = lua_source("renew.lua", fenced=True)


class _Held:
    __slots__ = ("attempt", "on_lost")

    def __init__(self, attempt: int, on_lost: Callable[[], None]) -> None:
        self.attempt = attempt
        self.on_lost = on_lost


class LeaseKeeper:
    """Renews the leases `hold` registers until `release`; calls a lease's `on_lost` on the
    event loop when a renewal is refused (the run was taken over, or its lease ran out)."""

    def __init__(
        self,
        redis_url: str,
        keys: KeySpace,
        *,
        lease_s: float,
        cluster: bool = False,
        stalled_loop_s: float = STALLED_LOOP_S,
    ) -> None:
        self.keys = keys
        self.lease_s = lease_s
        self.stalled_loop_s = stalled_loop_s
        options: dict[str, Any] = {
            "socket_timeout": lease_s / 3,
            "socket_connect_timeout": lease_s / 3,
            "socket_keepalive": True,
        }
        self._client: SyncRedis | SyncRedisCluster = (
            SyncRedisCluster.from_url(redis_url, **options)
            if cluster
            else SyncRedis.from_url(redis_url, **options)
        )
        self._sha = ""
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._turned_at = time.monotonic()  # when the event loop last ran our callback
        self._thread = threading.Thread(target=self._keep, name="runstream-leases", daemon=True)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self._load_script)
        self._thread.start()

    async def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            await asyncio.to_thread(self._thread.join, self.lease_s + 2.0)
        self._client.close()

    def hold(self, run_id: str, attempt: int, on_lost: Callable[[], None]) -> None:
        """Renew `run_id`'s lease for `attempt` from now on (it was just taken)."""
        with self._lock:
            self._held[run_id] = _Held(attempt, on_lost)

    def release(self, run_id: str) -> None:
        with self._lock:
            self._held.pop(run_id, None)

    def _keep(self) -> None:
        interval = self.lease_s / 3
        stalled, blocked_s = False, 0.0
        while not self._stopping.wait(interval):
            assert self._loop is not None
            lag = time.monotonic() - self._turned_at
            try:
                self._loop.call_soon_threadsafe(self._turned)
            except RuntimeError:  # the loop is closed: the process is stopping
                return
            with self._lock:
                held = list(self._held.items())
            if lag > self.stalled_loop_s:
                if not stalled:
                    logger.error(
                        "the worker's event loop has not turned for too long: letting its runs'"
                        " leases lapse, so other workers take them over",
                        stalled_s=round(lag),
                        run_ids=[run_id for run_id, _ in held],
                    )
                stalled = True
                continue
            if lag > 2 * interval:
                blocked_s = lag  # logged once it turns again, with the whole stall's length
            elif blocked_s:
                logger.warning(
                    "the worker's event loop was blocked: a blocking call in an async node (run"
                    " it in a thread, or make the node sync: LangGraph runs those in threads), or"
                    " a starved CPU; the leases were renewed meanwhile",
                    blocked_s=round(blocked_s, 1),
                    run_ids=[run_id for run_id, _ in held],
                )
                blocked_s = 0.0
            stalled = False
            if held:
                self._renew(held)

    def _load_script(self) -> None:
        self._sha = str(self._client.script_load(_RENEW))

    def _turned(self) -> None:
        self._turned_at = time.monotonic()

    def _renew(self, held: Sequence[tuple[str, _Held]]) -> None:
        try:
            replies = self._renew_all(held)
        except RedisError as exc:
            logger.warning("lease renewal failed; will retry", error=str(exc))
            return
        for (run_id, lease), reply in zip(held, replies, strict=True):
            if not isinstance(reply, RedisError):
                continue
            error = from_redis(reply, run_id)
            if isinstance(error, StoreUnavailable):
                logger.warning("lease renewal failed; will retry", run_id=run_id, error=str(error))
                continue
            assert isinstance(error, Fenced | StreamGone)
            with self._lock:
                if self._held.get(run_id) is not lease:
                    continue  # released (or held anew) meanwhile
                del self._held[run_id]
            assert self._loop is not None
            self._loop.call_soon_threadsafe(lease.on_lost)

    def _renew_all(self, held: Sequence[tuple[str, _Held]]) -> list[Any]:
        """One EVALSHA of the renew script per lease, in one pipeline; errors in place."""
        lease_ms = int(self.lease_s * 1000)
        for retry in (False, True):
            if retry:
                self._load_script()  # Redis restarted: its scripts are gone
            with self._client.pipeline(transaction=False) as pipe:
                for run_id, lease in held:
                    key = self.keys.run_record(run_id)
                    pipe.execute_command("EVALSHA", self._sha, 1, key, lease.attempt, lease_ms)
                replies: list[Any] = pipe.execute(raise_on_error=False)
            if not any(isinstance(reply, NoScriptError) for reply in replies):
                break
        return replies
