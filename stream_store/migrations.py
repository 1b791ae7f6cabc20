"""Postgres schema for runstream's own tables; `runstream migrate` applies it.

Migrations are append-only and applied under an advisory lock, so servers and workers that
start together can all call `migrate` safely. The tables of the LangGraph checkpointer and of
LangGraph's store (stream_store/store.py) are created by their own `setup()`, in the same schema.
"""

from __future__ import annotations

import asyncio

from psycopg import sql

from .checkpoints import setup_checkpoints
from .connections import PgPool
from .store import StoreOptions, setup_store

__all__ = ["migrate"]

_LOCK_ID = 0x72756E73  # "runs"; the lock's second key is the schema's hashtext

MIGRATIONS: list[str] = [
    """
    CREATE TABLE runstream_threads (
        thread_id uuid PRIMARY KEY,
        owner text NOT NULL,
        title text,
        metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE INDEX runstream_threads_owner_created
        ON runstream_threads (owner, created_at DESC, thread_id DESC);
    CREATE TABLE runstream_runs (
        run_id uuid PRIMARY KEY,
        thread_id uuid NOT NULL REFERENCES runstream_threads ON DELETE CASCADE,
        owner text NOT NULL,
        graph text NOT NULL,
        status text NOT NULL,
        attempt integer NOT NULL DEFAULT 1,
        dispatch integer NOT NULL DEFAULT 1,
        input jsonb NOT NULL,
        config jsonb NOT NULL DEFAULT '{}'::jsonb,
        metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
        multitask text NOT NULL DEFAULT 'reject',
        resume jsonb,
        idempotency_key text,
        request_hash text,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        started_at timestamptz,
        finished_at timestamptz,
        error jsonb,
        interrupt jsonb,
        output jsonb,
        last_event_id text
    );
    CREATE UNIQUE INDEX runstream_runs_idempotency
        ON runstream_runs (owner, idempotency_key) WHERE idempotency_key IS NOT NULL;
    CREATE INDEX runstream_runs_thread ON runstream_runs (thread_id, created_at);
    CREATE INDEX runstream_runs_active ON runstream_runs (status)
        WHERE status IN ('queued', 'running', 'interrupted');
    """,
    """
    ALTER TABLE runstream_runs ADD COLUMN claimed_at timestamptz;
    CREATE TABLE runstream_tool_executions (
        run_id uuid NOT NULL REFERENCES runstream_runs ON DELETE CASCADE,
        tool_call_id text NOT NULL,
        tool text NOT NULL,
        attempt integer NOT NULL,
        result jsonb,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        PRIMARY KEY (run_id, tool_call_id)
    );
    CREATE TABLE runstream_notes (
        note_id bigserial PRIMARY KEY,
        thread_id uuid NOT NULL REFERENCES runstream_threads ON DELETE CASCADE,
        run_id uuid NOT NULL,
        tool_call_id text NOT NULL,
        content text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    """,
    """
    ALTER TABLE runstream_runs ADD COLUMN queued_at timestamptz NOT NULL
        DEFAULT clock_timestamp();
    ALTER TABLE runstream_runs ADD COLUMN settled_at timestamptz;
    CREATE INDEX runstream_runs_unsettled ON runstream_runs (settled_at)
        WHERE last_event_id IS NULL AND settled_at IS NOT NULL;
    CREATE INDEX runstream_threads_updated ON runstream_threads (updated_at);
    """,
    # The count of an owner's queued and running runs at every submit (RUNSTREAM_MAX_ACTIVE_RUNS).
    """
    CREATE INDEX runstream_runs_owner_working ON runstream_runs (owner)
        WHERE status IN ('queued', 'running');
    """,
    # The LangGraph API's runs (docs/langgraph.md): the stream modes the worker records beyond
    # runstream's own events, and the request's LangGraph fields, shown back in its run object.
    """
    ALTER TABLE runstream_runs ADD COLUMN stream_modes text[] NOT NULL DEFAULT '{}';
    ALTER TABLE runstream_runs ADD COLUMN kwargs jsonb NOT NULL DEFAULT '{}';
    """,
    # Traces (stream_store/tracing.py): the W3C `traceparent` of the run's submit span, which
    # every attempt continues, and of the attempt that claimed the run last, which the next
    # attempt links to. Both null when traces are off.
    """
    ALTER TABLE runstream_runs ADD COLUMN traceparent text;
    ALTER TABLE runstream_runs ADD COLUMN attempt_traceparent text;
    """,
    # LangGraph's crons (docs/langgraph.md, "Crons"): each owner's schedules, and the run request
    # each fires (`payload`). A thread's crons go with the thread. A server's scheduler claims a
    # due one (`runstream_crons_due`) with FOR UPDATE SKIP LOCKED, until `claimed_until`.
    """
    CREATE TABLE runstream_crons (
        cron_id uuid PRIMARY KEY,
        owner text NOT NULL,
        graph text NOT NULL,
        thread_id uuid REFERENCES runstream_threads ON DELETE CASCADE,
        schedule text NOT NULL,
        timezone text,
        payload jsonb NOT NULL,
        metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
        on_run_completed text,
        enabled boolean NOT NULL DEFAULT true,
        end_time timestamptz,
        next_run_date timestamptz,
        claimed_until timestamptz,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE INDEX runstream_crons_owner_created
        ON runstream_crons (owner, created_at DESC, cron_id DESC);
    CREATE INDEX runstream_crons_thread ON runstream_crons (thread_id);
    CREATE INDEX runstream_crons_due ON runstream_crons (next_run_date)
        WHERE enabled AND next_run_date IS NOT NULL;
    """,
    # LangGraph's assistants that callers create (docs/langgraph.md, "Assistants"): each
    # owner's, the active version in `runstream_assistants` and every version beside it. A cron
    # of a created assistant names it (`assistant_id`; null: a graph's own assistant).
    """
    CREATE TABLE runstream_assistants (
        assistant_id uuid PRIMARY KEY,
        owner text NOT NULL,
        graph text NOT NULL,
        name text NOT NULL,
        description text,
        config jsonb NOT NULL DEFAULT '{}'::jsonb,
        context jsonb NOT NULL DEFAULT '{}'::jsonb,
        metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
        version integer NOT NULL DEFAULT 1,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE INDEX runstream_assistants_owner_created
        ON runstream_assistants (owner, created_at DESC, assistant_id DESC);
    CREATE TABLE runstream_assistant_versions (
        assistant_id uuid NOT NULL REFERENCES runstream_assistants ON DELETE CASCADE,
        version integer NOT NULL,
        graph text NOT NULL,
        name text NOT NULL,
        description text,
        config jsonb NOT NULL,
        context jsonb NOT NULL,
        metadata jsonb NOT NULL,
        created_at timestamptz NOT NULL,
        PRIMARY KEY (assistant_id, version)
    );
    ALTER TABLE runstream_crons ADD COLUMN assistant_id uuid;
    CREATE INDEX runstream_crons_assistant ON runstream_crons (assistant_id)
        WHERE assistant_id IS NOT NULL;
    """,
    # The id of the interrupt an interrupted run waits at (LangGraph's `Interrupt.id`, one per
    # question, even for two asked by one node): a resume's answer records which question it
    # answers, so that a retried attempt never gives it to the next one (runner/graph_input.py).
    """
    ALTER TABLE runstream_runs ADD COLUMN interrupt_id text;
    """,
    # Evaluations a graph records of its own work (runner/evaluations.py): one row per run and
    # key, whatever the retries; they go with their run (and so with its thread). Their totals
    # by graph and kind, which /metrics reads, are added to as each is written and never taken
    # from: counters, read without scanning every evaluation (`at_most`: per score bucket).
    """
    CREATE TABLE runstream_evaluations (
        run_id uuid NOT NULL REFERENCES runstream_runs ON DELETE CASCADE,
        key text NOT NULL,
        thread_id uuid NOT NULL,
        owner text NOT NULL,
        graph text NOT NULL,
        kind text NOT NULL,
        score double precision NOT NULL CHECK (score >= 0 AND score <= 1),
        passed boolean,
        detail jsonb,
        attempt integer NOT NULL,
        trace_id text,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        PRIMARY KEY (run_id, key)
    );
    CREATE INDEX runstream_evaluations_thread
        ON runstream_evaluations (thread_id, created_at);
    CREATE TABLE runstream_evaluation_totals (
        graph text NOT NULL,
        kind text NOT NULL,
        evaluations bigint NOT NULL,
        passed bigint NOT NULL,
        failed bigint NOT NULL,
        score_sum double precision NOT NULL,
        at_most bigint[] NOT NULL,
        PRIMARY KEY (graph, kind)
    );
    """,
    # The checkpoint fence as one statement that fails, rather than a row to read back: a
    # fenced checkpoint write is then BEGIN, this, the writes and COMMIT in one pipeline, one
    # round trip instead of four (stream_store/checkpoints.py). The share lock on the run's row
    # is held to the commit, so a take-over waits for the write or refuses it.
    """
    CREATE FUNCTION runstream_fence(fenced_run uuid, fenced_attempt integer) RETURNS void
    LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM 1 FROM runstream_runs
            WHERE run_id = fenced_run AND attempt = fenced_attempt AND status = 'running'
            FOR SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'run %: attempt % no longer owns the run', fenced_run, fenced_attempt
                USING ERRCODE = 'RSF01';
        END IF;
    END
    $$;
    """,
    # `once` in two phases (runner/tools.py `ToolLedger.once`): the claim commits before the
    # effect runs, and the effect's outcome is recorded after it: its JSON result, or why it
    # could not be recorded (a result that is not JSON), which a replay raises again.
    """
    ALTER TABLE runstream_tool_executions ADD COLUMN error text;
    """,
    # X-Trace-ID (server/trace_ids.py): the trace id of the request that submitted the run, and
    # of the run an evaluation grades, beside the W3C `traceparent` / `trace_id`
    """
    ALTER TABLE runstream_runs ADD COLUMN x_trace_id text;
    ALTER TABLE runstream_evaluations ADD COLUMN x_trace_id text;
    """,
    # LangGraph's webhooks (docs/langgraph.md, "Webhooks"): when a run that asked for one
    # (`kwargs.webhook`) leaves `running` (ended, or stopped at interrupt(), which LangGraph
    # calls `success`), this trigger records its delivery in the same transaction as the
    # status, so no crash loses it. `run` is the run as it ended (a rollback deletes the run
    # itself); `payload` is built at the first attempt and sent as is on every retry. A
    # worker's delivery loop claims a due one with FOR UPDATE SKIP LOCKED until
    # `claimed_until` (runner/webhooks.py); each attempt is appended to `attempts`.
    """
    CREATE TABLE runstream_webhooks (
        delivery_id bigserial PRIMARY KEY,
        run_id uuid NOT NULL,
        thread_id uuid NOT NULL,
        owner text NOT NULL,
        url text NOT NULL,
        run jsonb NOT NULL,
        payload jsonb,
        state text NOT NULL DEFAULT 'pending',
        attempts jsonb NOT NULL DEFAULT '[]'::jsonb,
        next_attempt_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        claimed_until timestamptz,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        done_at timestamptz
    );
    CREATE INDEX runstream_webhooks_due ON runstream_webhooks (next_attempt_at)
        WHERE state = 'pending';
    CREATE INDEX runstream_webhooks_owner_pending ON runstream_webhooks (owner)
        WHERE state = 'pending';
    CREATE INDEX runstream_webhooks_run ON runstream_webhooks (run_id);
    CREATE INDEX runstream_webhooks_done ON runstream_webhooks (done_at)
        WHERE done_at IS NOT NULL;
    CREATE FUNCTION runstream_webhook_on_end() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO runstream_webhooks (run_id, thread_id, owner, url, run)
        VALUES (
            NEW.run_id, NEW.thread_id, NEW.owner, NEW.kwargs->>'webhook',
            jsonb_build_object(
                'run_id', NEW.run_id, 'thread_id', NEW.thread_id, 'graph', NEW.graph,
                'status', NEW.status, 'created_at', NEW.created_at,
                'started_at', NEW.started_at,
                'ended_at', coalesce(NEW.finished_at, clock_timestamp()),
                'metadata', NEW.metadata, 'kwargs', NEW.kwargs, 'multitask', NEW.multitask,
                'error', NEW.error
            )
        );
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER runstream_runs_webhook AFTER UPDATE OF status ON runstream_runs
        FOR EACH ROW
        WHEN (
            OLD.status = 'running'
            AND NEW.status IN ('interrupted', 'succeeded', 'failed', 'cancelled')
            AND jsonb_typeof(NEW.kwargs->'webhook') = 'string'
        )
        EXECUTE FUNCTION runstream_webhook_on_end();
    """,
]


async def migrate(pool: PgPool, schema: str, store: StoreOptions | None = None) -> int:
    """Create the schema, apply pending migrations and the checkpointer's and the store's (with
    the tables of `store`'s index, if it has one); returns how many of runstream's own were
    applied.

    One session-level advisory lock per schema covers them all, so concurrent start-ups of one
    deployment queue behind it, and those of other schemas in the database (the tests' private
    ones) do not wait for it.
    """
    applied = 0
    async with pool.connection() as conn:
        # Poll instead of blocking in pg_advisory_lock: a session blocked in a statement holds
        # a snapshot, and the checkpointer's CREATE INDEX CONCURRENTLY waits for every such
        # snapshot in the database, so a blocking wait would deadlock with the lock holder.
        while True:
            cur = await conn.execute(
                "SELECT pg_try_advisory_lock(%s, hashtext(%s)) AS ok", (_LOCK_ID, schema)
            )
            locked = await cur.fetchone()
            if locked is not None and locked["ok"]:
                break
            await asyncio.sleep(0.05)
        try:
            await conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
            )
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS runstream_migrations ("
                " version integer PRIMARY KEY,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            cur = await conn.execute(
                "SELECT coalesce(max(version), -1) AS v FROM runstream_migrations"
            )
            latest = await cur.fetchone()
            done = latest["v"] if latest is not None else -1
            for version, statement in enumerate(MIGRATIONS):
                if version <= done:
                    continue
                async with conn.transaction():
                    # several commands in one string: never a prepared statement
                    await conn.execute(statement, prepare=False)
                    await conn.execute(
                        "INSERT INTO runstream_migrations (version) VALUES (%s)", (version,)
                    )
                applied += 1
            await setup_checkpoints(conn)  # on this connection: it holds the lock
            await setup_store(conn, store or StoreOptions())
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (_LOCK_ID, schema))
    return applied
