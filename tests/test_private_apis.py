"""The private names of other packages that runstream overrides are still there, as we use them
(issue 10).

A private method can change in any release without notice. Each check names the package, the
private name and the file of ours that depends on it, so an upgrade that breaks one fails here,
loudly, rather than as a worker that stops waking up or a checkpoint write that is no longer
fenced. No service is needed.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from arq.connections import ArqRedis
from arq.worker import Worker
from langgraph.checkpoint.postgres import _ainternal
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver


def _broken(package: str, name: str, ours: str, what: str) -> str:
    return f"{package}: {name} {what}; fix {ours}, which relies on it"


def _kind(function: Any) -> str:
    if inspect.isasyncgenfunction(inspect.unwrap(function)):
        return "an async context manager"
    return "a coroutine function" if inspect.iscoroutinefunction(function) else "a plain function"


def _check_signature(
    package: str, name: str, ours: str, obj: Any, expected: str, kind: str
) -> None:
    """`obj` is a function of `kind` whose parameters are `expected` (annotations left out)."""
    assert callable(obj), _broken(package, name, ours, "is gone")
    signature = inspect.signature(obj)
    bare = signature.replace(
        parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
        return_annotation=signature.empty,
    )
    assert str(bare) == expected, _broken(
        package, name, ours, f"now has the signature {signature}, not {expected}"
    )
    assert _kind(obj) == kind, _broken(package, name, ours, f"is now {_kind(obj)}, not {kind}")


def _check_called(package: str, name: str, ours: str, caller: Any, call: str) -> None:
    """`caller`'s source still contains `call`: what we override is still used as we assume."""
    source = inspect.getsource(caller)
    assert call in source, _broken(
        package, name, ours, f"no longer appears as `{call}` in {caller.__qualname__}"
    )


class TestArq:
    """`runner/worker.py` (`RunWorker`) overrides two private methods of arq's `Worker` and its
    `start_jobs`."""

    PACKAGE = "arq"
    OURS = "runner/worker.py (RunWorker)"

    def test_poll_iteration_is_the_loop_body(self) -> None:
        """`Worker._poll_iteration(self)`, a coroutine, is what the poll loop runs each turn."""
        name = "Worker._poll_iteration"
        method = getattr(Worker, "_poll_iteration", None)
        _check_signature(self.PACKAGE, name, self.OURS, method, "(self)", "a coroutine function")
        _check_called(self.PACKAGE, name, self.OURS, Worker, "await self._poll_iteration()")

    def test_poll_iteration_hands_the_ids_it_read_to_start_jobs(self) -> None:
        """`Worker.start_jobs(self, job_ids)`, a coroutine, gets the window of ready ids the
        poll read, which `RunWorker` reorders fairly between callers before arq claims them."""
        name = "Worker.start_jobs"
        method = getattr(Worker, "start_jobs", None)
        _check_signature(
            self.PACKAGE, name, self.OURS, method, "(self, job_ids)", "a coroutine function"
        )
        _check_called(
            self.PACKAGE, name, self.OURS, Worker._poll_iteration, "await self.start_jobs(job_ids)"
        )
        _check_called(self.PACKAGE, name, self.OURS, Worker.start_jobs, "in_progress_key")

    def test_release_sem_dec_counter_on_complete_runs_when_a_job_ends(self) -> None:
        """`Worker._release_sem_dec_counter_on_complete(self)`, plain, frees a job slot."""
        name = "Worker._release_sem_dec_counter_on_complete"
        method = getattr(Worker, "_release_sem_dec_counter_on_complete", None)
        _check_signature(self.PACKAGE, name, self.OURS, method, "(self)", "a plain function")
        _check_called(
            self.PACKAGE, name, self.OURS, Worker, "self._release_sem_dec_counter_on_complete()"
        )


class TestArqJobFinish:
    """`runner/worker.py` (`RunWorker.finish_job`, `finish_failed_job`) replaces arq's two ends
    of a job with the same MULTI minus the ZREM of `arq:abort` (outside the queue's slot on a
    Redis Cluster): arq must still call them as we define them and write what we copy."""

    PACKAGE = "arq"
    OURS = "runner/worker.py (RunWorker.finish_job, finish_failed_job)"

    @pytest.mark.parametrize(
        ("name", "expected"),
        [
            (
                "finish_job",
                "(self, job_id, finish, result_data, result_timeout_s, keep_result_forever,"
                " incr_score, keep_in_progress)",
            ),
            ("finish_failed_job", "(self, job_id, result_data)"),
        ],
    )
    def test_finish_methods_keep_their_signatures(self, name: str, expected: str) -> None:
        method = getattr(Worker, name, None)
        _check_signature(
            self.PACKAGE, f"Worker.{name}", self.OURS, method, expected, "a coroutine function"
        )
        _check_called(self.PACKAGE, f"Worker.{name}", self.OURS, Worker.run_job, f"self.{name}(")

    def test_finish_job_writes_what_ours_copies(self) -> None:
        for call in (
            "tr.pexpire(in_progress_key, to_ms(keep_in_progress))",
            "tr.set(result_key_prefix + job_id, result_data, px=to_ms(expire))",
            "delete_keys += [retry_key_prefix + job_id, job_key_prefix + job_id]",
            "tr.zrem(abort_jobs_ss, job_id)",
            "tr.zrem(self.queue_name, job_id)",
            "tr.zincrby(self.queue_name, incr_score, job_id)",
            "tr.delete(*delete_keys)",
        ):
            _check_called(self.PACKAGE, "Worker.finish_job", self.OURS, Worker.finish_job, call)


class TestArqJobClaimAndEnqueue:
    """`runner/worker.py` (`RunWorker.start_jobs`) and `stream_store/queue.py` (`RunQueue`) do
    arq's claim of a job and its enqueue in one script call each (`start_jobs.lua`,
    `enqueue_job.lua`): arq's own code must still do what the scripts copy, and the worker state
    `start_jobs` keeps must still be there."""

    PACKAGE = "arq"

    def test_start_jobs_claims_as_start_job_lua_does(self) -> None:
        ours = "runner/worker.py (RunWorker.start_jobs) and stream_store/scripts/start_jobs.lua"
        for call in (
            "await self.sem.acquire()",
            "self.job_counter = self.job_counter + 1",
            "if ongoing_exists or not score or score > timestamp_ms():",
            "pipe.psetex(in_progress_key, int(self.in_progress_timeout_s * 1000), b'1')",
            "self.loop.create_task(self.run_job(job_id, int(score)))",
            "self._release_sem_dec_counter_on_complete()",
            "self.tasks[job_id] = t",
        ):
            _check_called(self.PACKAGE, "Worker.start_jobs", ours, Worker.start_jobs, call)

    def test_run_job_takes_the_claimed_id_and_score(self) -> None:
        """`Worker.run_job(self, job_id, score)`, a coroutine, runs a job `start_jobs` claimed."""
        ours = "runner/worker.py (RunWorker.start_jobs)"
        method = getattr(Worker, "run_job", None)
        expected = "(self, job_id, score)"
        _check_signature(
            self.PACKAGE, "Worker.run_job", ours, method, expected, "a coroutine function"
        )

    def test_enqueue_job_writes_as_enqueue_job_lua_does(self) -> None:
        ours = "stream_store/queue.py (RunQueue.enqueue) and stream_store/scripts/enqueue_job.lua"
        for call in (
            "if await pipe.exists(job_key, result_key_prefix + job_id):",
            "expires_ms = expires_ms or score - enqueue_time_ms + self.expires_extra_ms",
            "serialize_job(function, args, kwargs, _job_try, enqueue_time_ms,"
            " serializer=self.job_serializer)",
            "pipe.psetex(job_key, expires_ms, job)",
            "pipe.zadd(_queue_name, {job_id: score})",
        ):
            _check_called(self.PACKAGE, "ArqRedis.enqueue_job", ours, ArqRedis.enqueue_job, call)


class TestLanggraphCheckpointPostgres:
    """`stream_store/checkpoints.py` (`FencedPostgresSaver`) overrides `AsyncPostgresSaver._cursor`
    and calls `_ainternal.get_connection`."""

    PACKAGE = "langgraph-checkpoint-postgres"
    OURS = "stream_store/checkpoints.py (FencedPostgresSaver)"

    def test_cursor_takes_pipeline_and_is_an_async_context_manager(self) -> None:
        """`AsyncPostgresSaver._cursor(self, *, pipeline=False)` yields a cursor."""
        name = "AsyncPostgresSaver._cursor"
        method = getattr(AsyncPostgresSaver, "_cursor", None)
        expected = "(self, *, pipeline=False)"
        _check_signature(
            self.PACKAGE, name, self.OURS, method, expected, "an async context manager"
        )

    @pytest.mark.parametrize("writer", ["aput", "aput_writes"])
    def test_checkpoint_writes_ask_for_a_pipeline(self, writer: str) -> None:
        """The fence applies to `_cursor(pipeline=True)`: every checkpoint write asks for it."""
        _check_called(
            self.PACKAGE,
            "AsyncPostgresSaver._cursor",
            self.OURS,
            getattr(AsyncPostgresSaver, writer),
            "self._cursor(pipeline=True)",
        )

    @pytest.mark.parametrize("attribute", ["conn", "pipe"])
    def test_saver_keeps_conn_and_pipe(self, attribute: str) -> None:
        """Our `_cursor` reads `self.conn` and `self.pipe`, which `__init__` sets."""
        _check_called(
            self.PACKAGE,
            f"AsyncPostgresSaver.{attribute}",
            self.OURS,
            AsyncPostgresSaver.__init__,
            f"self.{attribute} = {attribute}",
        )

    def test_get_connection_takes_a_pool(self) -> None:
        """`_ainternal.get_connection(conn)`: an async context manager, a pool's connection."""
        name = "langgraph.checkpoint.postgres._ainternal.get_connection"
        function = getattr(_ainternal, "get_connection", None)
        _check_signature(
            self.PACKAGE, name, self.OURS, function, "(conn)", "an async context manager"
        )
