"""`/readyz`'s probes log a dependency that stops answering, with its error, once per change
of state rather than at every probe."""

from __future__ import annotations

from urllib.parse import urlsplit

from redis.asyncio import Redis

from server.readiness import Readiness
from stream_store.services import open_services
from stream_store.settings import Settings
from tests.processes import TcpProxy
from tests.test_errors import all_logs  # capture_logs at every level


class TestReadinessLogs:
    async def test_a_failing_dependency_is_logged_once_with_its_error_and_its_return(
        self, settings: Settings
    ) -> None:
        real = urlsplit(str(settings.redis_url))
        proxy = TcpProxy(real.hostname or "127.0.0.1", real.port or 6379)
        await proxy.start()
        # Redis through a proxy that can go down; Postgres direct (it keeps answering).
        through = real._replace(
            netloc=real.netloc.replace(f"{real.hostname}:{real.port}", f"127.0.0.1:{proxy.port}")
        )
        redis = Redis.from_url(through.geturl())
        try:
            async with open_services(settings, pool_size=2) as services:
                readiness = Readiness(redis, services.pool)
                with all_logs() as logs:
                    assert await readiness.check() == {"redis": True, "postgres": True}
                    proxy.cut()
                    await redis.connection_pool.disconnect()
                    for _ in range(3):
                        assert await readiness.check() == {"redis": False, "postgres": True}
                    proxy.restore()
                    for _ in range(2):
                        assert await readiness.check() == {"redis": True, "postgres": True}
        finally:
            await redis.aclose()
            await proxy.stop()
        changes = [log for log in logs if log["event"].startswith("readiness check")]
        assert [(log["event"], log["log_level"], log["dependency"]) for log in changes] == [
            ("readiness check failing", "warning", "redis"),
            ("readiness check passing again", "info", "redis"),
        ]
        assert "Connection" in changes[0]["error"], changes[0]  # what failed, for the operator
