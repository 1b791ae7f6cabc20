"""Thread deletes are all or nothing and never need two pooled connections (issue 9, finding 1)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from runner.job_loop import JobLoop
from stream_store.connections import NestedCheckout, open_pg_pool
from stream_store.settings import Settings
from tests.conftest import schema_connection
from tests.test_threads import finish

# Four times the connections in the server's pool (10): on the old code, enough of them held a
# connection each while waiting for a second one that the pool ran dry (503 after 10 s).
CONCURRENT = 40


async def checkpoint_rows(settings: Settings, thread_id: str) -> int:
    async with await schema_connection(settings) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM checkpoints WHERE thread_id = %s", (thread_id,)
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


class TestConcurrentDeletes:
    """More deletes at once than the pool has connections all succeed, and others still get in."""

    async def test_concurrent_deletes_of_many_threads_all_succeed(
        self, client: httpx.AsyncClient, worker: JobLoop, settings: Settings
    ) -> None:
        runs = await asyncio.gather(*(finish(client, f"thread {i}") for i in range(CONCURRENT)))
        thread_ids = [run["thread_id"] for run in runs]

        async def other_caller_lists() -> int:
            await asyncio.sleep(0.01)  # while the deletes hold the pool
            return (await client.get("/v1/threads")).status_code

        *deletes, listed = await asyncio.gather(
            *(client.delete(f"/v1/threads/{tid}") for tid in thread_ids), other_caller_lists()
        )

        assert [d.status_code for d in deletes] == [204] * CONCURRENT, [d.text for d in deletes]
        assert listed == 200
        for tid in thread_ids:
            assert (await client.get(f"/v1/threads/{tid}")).status_code == 404
            assert await checkpoint_rows(settings, tid) == 0

    async def test_concurrent_deletes_of_one_thread_succeed_once(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        run = await finish(client, "delete me many times")
        path = f"/v1/threads/{run['thread_id']}"

        answers = await asyncio.gather(*(client.delete(path) for _ in range(CONCURRENT)))

        codes = sorted(a.status_code for a in answers)
        assert codes == [204] + [404] * (CONCURRENT - 1), [a.text for a in answers]


class TestDeleteIsAtomic:
    """A delete that fails at commit leaves the thread whole: its runs and its messages."""

    async def test_failed_commit_keeps_thread_and_messages(
        self, client: httpx.AsyncClient, worker: JobLoop, settings: Settings
    ) -> None:
        run = await finish(client, "keep my words")
        thread_id = run["thread_id"]
        before = (await client.get(f"/v1/threads/{thread_id}")).json()["messages"]
        assert [m["content"] for m in before] == ["keep my words", "keep my words"]

        # A deferred constraint trigger fails the delete's transaction at COMMIT, after every
        # statement in it (the checkpoint purge included) has run.
        async with await schema_connection(settings) as conn:
            await conn.execute(
                "CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS"
                " $$ BEGIN RAISE EXCEPTION 'commit refused by the test'; END $$"
            )
            await conn.execute(
                "CREATE CONSTRAINT TRIGGER refuse_delete AFTER DELETE ON runstream_threads"
                " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_delete()"
            )
            failed = await client.delete(f"/v1/threads/{thread_id}")
            await conn.execute("DROP TRIGGER refuse_delete ON runstream_threads")

        assert failed.status_code == 500
        assert "commit refused" not in failed.text  # internal detail stays in the log
        kept = await client.get(f"/v1/threads/{thread_id}")
        assert kept.status_code == 200
        assert kept.json()["messages"] == before
        runs = (await client.get(f"/v1/threads/{thread_id}/runs")).json()["runs"]
        assert [r["run_id"] for r in runs] == [run["run_id"]]
        replay = await client.get(f"/v1/runs/{run['run_id']}/events")
        assert replay.status_code == 200 and "event: done" in replay.text

        assert (await client.delete(f"/v1/threads/{thread_id}")).status_code == 204
        assert await checkpoint_rows(settings, thread_id) == 0


class TestOneConnectionPerTask:
    """The pool refuses a second connection to a task that holds one, instead of deadlocking."""

    async def test_nested_checkout_is_refused(self, settings: Settings) -> None:
        pool = await open_pg_pool(settings, max_size=2)
        try:
            async with pool.connection():
                with pytest.raises(NestedCheckout, match="already holds a connection"):
                    async with pool.connection():
                        pass
            async with pool.connection():  # the refusal left nothing held
                pass
        finally:
            await pool.close()

    async def test_sibling_tasks_each_get_a_connection(self, settings: Settings) -> None:
        pool = await open_pg_pool(settings, max_size=4)
        try:

            async def one() -> int:
                async with pool.connection() as conn:
                    cur = await conn.execute("SELECT 1 AS one")
                    row = await cur.fetchone()
                    await asyncio.sleep(0.01)
                return int(row["one"]) if row else 0

            assert await asyncio.gather(*(one() for _ in range(8))) == [1] * 8
            async with pool.connection():  # released after each use: the task may take another
                pass
        finally:
            await pool.close()
