"""Bounds on what a caller sends and on what one caller may hold: every one is named here, with
its unit.

The fixed bounds are constants. Those an operator may want to change are `Settings` fields
(`RUNSTREAM_MAX_*`) whose defaults are the `DEFAULT_*` constants below; only
`stream_store.settings` reads them from the environment. The server checks every bound before it
records anything (`server.inputs`); the worker applies again the ones it acts on (the fake
model's delay). docs/protocol.md section 3.5 lists them all.

The per-caller limits (submits per minute, active runs, open SSE connections) are kept in
Redis by `stream_store.quotas` and, for active runs, in Postgres by `RunSubmitter.create_run`; a
value of 0 turns one off. docs/security.md, "Per-caller limits", gives the reasons.

The per-run bounds on a run's event stream (events, bytes) are kept by the append scripts in
Redis (`stream_store/scripts/append_batch.lua`): a caller's input is bounded, but what a graph
makes of it is not, and every event it emits is held in Redis.
"""

from __future__ import annotations

__all__ = [
    "ACTIVE_RUNS_RETRY_AFTER_S",
    "ASSISTANT_CONFIG_MAX_BYTES",
    "ASSISTANT_DESCRIPTION_MAX_CHARS",
    "ASSISTANT_NAME_MAX_CHARS",
    "BATCH_MAX_RUNS",
    "BULK_CANCEL_MAX_RUNS",
    "DEFAULT_INTERRUPTED_TTL_S",
    "DEFAULT_MAX_ACTIVE_RUNS",
    "DEFAULT_MAX_ASSISTANTS",
    "DEFAULT_MAX_CRONS",
    "DEFAULT_MAX_MESSAGE_CHARS",
    "DEFAULT_MAX_METADATA_BYTES",
    "DEFAULT_MAX_METADATA_KEYS",
    "DEFAULT_MAX_RESUME_BYTES",
    "DEFAULT_MAX_RUN_EVENTS",
    "DEFAULT_MAX_RUN_MESSAGES",
    "DEFAULT_MAX_RUN_STREAM_BYTES",
    "DEFAULT_MAX_SSE_CONNECTIONS",
    "DEFAULT_MAX_SSE_CONNECTIONS_PER_TOKEN",
    "DEFAULT_MAX_SUBMITS_PER_MINUTE",
    "GRAPH_NAME_MAX_CHARS",
    "IDEMPOTENCY_KEY_MAX_CHARS",
    "JSON_MAX_DEPTH",
    "MAX_FAKE_TOKEN_DELAY_MS",
    "MESSAGE_ID_MAX_CHARS",
    "METADATA_KEY_MAX_CHARS",
    "SSE_RETRY_AFTER_S",
    "SUBMIT_WINDOW_S",
]

# -- fixed ----------------------------------------------------------------------------------

IDEMPOTENCY_KEY_MAX_CHARS = 255
MESSAGE_ID_MAX_CHARS = 255
GRAPH_NAME_MAX_CHARS = 100
METADATA_KEY_MAX_CHARS = 255
# Nesting of arrays and objects in any JSON request body, the body itself being level 1.
JSON_MAX_DEPTH = 64
# `config.configurable.fake_token_delay_ms`: between two chunks of the fake model, so a run of n
# chunks holds its worker slot for at most n seconds.
MAX_FAKE_TOKEN_DELAY_MS = 1000
# A LangGraph assistant's `name` and `description` (characters), and its `config` and `context`
# (each, as compact JSON): every version of it is kept, and each run of it reads it.
ASSISTANT_NAME_MAX_CHARS = 255
ASSISTANT_DESCRIPTION_MAX_CHARS = 10_000
ASSISTANT_CONFIG_MAX_BYTES = 64 * 1024
# Runs in one `POST /runs/batch` (LangGraph API): each is a submit, counted as one.
BATCH_MAX_RUNS = 100
# Run ids in one `POST /runs/cancel` (LangGraph API), looked up in one query.
BULK_CANCEL_MAX_RUNS = 1000
# The window `RUNSTREAM_MAX_SUBMITS_PER_MINUTE` counts over: any 60 s, not calendar minutes.
SUBMIT_WINDOW_S = 60
# `Retry-After` of a 429 for active runs or SSE connections: when one frees is not known (a run
# ends, a client disconnects), so this is a hint. A 429 for submits says when a slot frees.
ACTIVE_RUNS_RETRY_AFTER_S = 5
SSE_RETRY_AFTER_S = 5

# -- defaults of settings (RUNSTREAM_MAX_*) -------------------------------------------------

DEFAULT_MAX_MESSAGE_CHARS = 100_000  # characters (code points) of one input message's content
DEFAULT_MAX_RUN_MESSAGES = 1000  # input messages of one run
DEFAULT_MAX_METADATA_BYTES = 16 * 1024  # run or thread metadata, encoded as compact JSON
DEFAULT_MAX_METADATA_KEYS = 64  # top-level keys of run or thread metadata
DEFAULT_MAX_RESUME_BYTES = 64 * 1024  # a resume value, encoded as compact JSON

# -- defaults of the per-run bounds on the event stream (RUNSTREAM_MAX_RUN_*) ----------------
# Past one, the run fails with `stream_too_large`; its outcome events are written beyond it.
# A 200 KB message of short words is about 100,000 token events, so these leave room for it.

DEFAULT_MAX_RUN_EVENTS = 200_000  # events in one run's stream, across its attempts and resumes
# ... and the bytes of their names and JSON data (Redis holds some 32 bytes more per event)
DEFAULT_MAX_RUN_STREAM_BYTES = 64 * 1024 * 1024
# An interrupted run's stream is kept this long after its `interrupted` event (a resume takes
# the TTL off again): an abandoned interrupt must not hold Redis for ever.
DEFAULT_INTERRUPTED_TTL_S = 7 * 24 * 3600

# -- defaults of the per-caller limits (RUNSTREAM_MAX_*; 0 turns one off) -------------------

DEFAULT_MAX_SUBMITS_PER_MINUTE = 120  # POST /v1/runs, /v1/threads/{id}/runs and /v1/threads
DEFAULT_MAX_ACTIVE_RUNS = 50  # the caller's runs that are queued or running
DEFAULT_MAX_SSE_CONNECTIONS = 100  # the caller's open GET /v1/runs/{id}/events responses
DEFAULT_MAX_SSE_CONNECTIONS_PER_TOKEN = 10  # ... of those, opened with one stream token
DEFAULT_MAX_ASSISTANTS = 100  # the caller's created assistants (LangGraph API)
DEFAULT_MAX_CRONS = 100  # the caller's crons (LangGraph API)
