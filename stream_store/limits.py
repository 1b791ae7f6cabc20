"""Bounds on what a caller sends and on what one caller may hold: every one is named here, with
its unit.

The fixed bounds are constants. Those an operator may want to change are `Settings` fields
(`RUNSTREAM_MAX_*`) whose defaults are the `DEFAULT_*` constants below; only
`stream_store.settings` reads them from the environment. The server checks every bound before it
records anything (`server.inputs`); the worker applies again the ones it acts on (the fake
model's delay). docs/protocol.md section 3.5 lists them all.

The per-caller limits (submits per minute, active runs, open SSE connections) are kept in
Redis by `server.callers.quotas` and, for active runs, in Postgres by `RunSubmitter.create_run`; a
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
    "BEARER_TOKEN_MAX_CHARS",
    "BULK_CANCEL_MAX_RUNS",
    "DEFAULT_INTERRUPTED_TTL_S",
    "DEFAULT_MAX_ACTIVE_RUNS",
    "DEFAULT_MAX_ASSISTANTS",
    "DEFAULT_MAX_ASSISTANT_VERSIONS",
    "DEFAULT_MAX_CHECKPOINT_BYTES",
    "DEFAULT_MAX_CONCURRENT_QUERIES",
    "DEFAULT_MAX_CRONS",
    "DEFAULT_MAX_FACTS",
    "DEFAULT_MAX_HEADER_BYTES",
    "DEFAULT_MAX_MESSAGE_CHARS",
    "DEFAULT_MAX_METADATA_BYTES",
    "DEFAULT_MAX_METADATA_KEYS",
    "DEFAULT_MAX_PENDING_WEBHOOKS",
    "DEFAULT_MAX_QUERIES_PER_MINUTE",
    "DEFAULT_MAX_REPLAY_BYTES",
    "DEFAULT_MAX_RESUME_BYTES",
    "DEFAULT_MAX_RUN_EVENTS",
    "DEFAULT_MAX_RUN_MESSAGES",
    "DEFAULT_MAX_RUN_STREAM_BYTES",
    "DEFAULT_MAX_SSE_CONNECTIONS",
    "DEFAULT_MAX_SSE_CONNECTIONS_PER_TOKEN",
    "DEFAULT_MAX_STORE_BYTES",
    "DEFAULT_MAX_STORE_ITEMS",
    "DEFAULT_MAX_SUBMITS_PER_MINUTE",
    "DEFAULT_MAX_THREAD_CHECKPOINTS",
    "DEFAULT_MAX_WRITES_PER_MINUTE",
    "DEFAULT_QUERY_TIMEOUT_MS",
    "EVALUATIONS_MAX_PER_RUN",
    "EVALUATION_DETAIL_MAX_BYTES",
    "EVALUATION_KEY_MAX_CHARS",
    "EVALUATION_KINDS_PER_GRAPH_IN_METRICS",
    "EVALUATION_KIND_MAX_CHARS",
    "GRAPH_NAME_MAX_CHARS",
    "IDEMPOTENCY_KEY_MAX_CHARS",
    "IDENTITY_MAX_BYTES",
    "JSON_MAX_DEPTH",
    "MAX_FAKE_TOKEN_DELAY_MS",
    "MESSAGE_ID_MAX_CHARS",
    "METADATA_KEY_MAX_CHARS",
    "QUERY_TURN_TIMEOUT_S",
    "SSE_RETRY_AFTER_S",
    "STORE_FILTER_MAX_BYTES",
    "STORE_FILTER_MAX_DEPTH",
    "STORE_FILTER_MAX_FIELDS",
    "STORE_INDEX_MAX_FIELDS",
    "STORE_KEY_MAX_BYTES",
    "STORE_NAMESPACE_MAX_BYTES",
    "STORE_QUERY_MAX_CHARS",
    "SUBMIT_WINDOW_S",
    "THREAD_VALUES_SCAN_MAX",
    "identity_problem",
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
# LangGraph's store: a namespace's labels joined with `.` and an item's key, each in UTF-8
# bytes. Both go into one B-tree index entry (with the owner's label), which Postgres caps at
# about 2,700 bytes: past it an insert fails.
STORE_NAMESPACE_MAX_BYTES = 1000
STORE_KEY_MAX_BYTES = 1000
# A store search's `filter`: each field is one SQL condition (or up to six, with operators) on
# every item under the prefix, so their number bounds the query's cost; its compact JSON and
# the nesting of the values it compares bound the rest.
STORE_FILTER_MAX_FIELDS = 32
STORE_FILTER_MAX_BYTES = 16 * 1024
STORE_FILTER_MAX_DEPTH = 8
# With a project's `store.index`, a search's `query` is embedded (one call to the embeddings'
# provider) and a put embeds each path of its `index` apart: their sizes bound that work.
STORE_QUERY_MAX_CHARS = 8192
STORE_INDEX_MAX_FIELDS = 32
# How long a caller-shaped query waits for its caller's turn (`RUNSTREAM_MAX_CONCURRENT_QUERIES`)
# before the request is answered 429.
QUERY_TURN_TIMEOUT_S = 10.0
# A thread search filtered by `values` reads each candidate's state from its checkpoints (no
# values are kept beside the thread): at most this many candidates, past its offset.
THREAD_VALUES_SCAN_MAX = 1000

# Evaluations a graph records (runner/evaluations.py): `kind` is a label of /metrics, so a short
# identifier; `key` names the evaluation within its run (as a tool call's id does in the
# ledger); `detail` is compact JSON. A run holds at most so many, which bounds a thread's read.
EVALUATION_KIND_MAX_CHARS = 32
EVALUATION_KEY_MAX_CHARS = 255
EVALUATION_DETAIL_MAX_BYTES = 16 * 1024
EVALUATIONS_MAX_PER_RUN = 1000
# /metrics counts per graph the first kinds written apart, any later one as `other`: the label's
# cardinality (and the totals table's rows) stay bounded whatever kinds the graphs invent.
EVALUATION_KINDS_PER_GRAPH_IN_METRICS = 20

# A credential in `Authorization: Bearer` or `x-api-key` (characters): a longer one is refused
# with 401 before it is decoded or compared. Identity providers' JWTs are a few KiB at most.
BEARER_TOKEN_MAX_CHARS = 16 * 1024
# A caller's identity (a JWT's `sub`, what a project's `authenticate` returns, an API key's
# owner), in UTF-8 bytes, printable characters only: it is the owner every row and key of the
# caller's data carries, and Postgres caps an index entry (owner, namespace, key) at ~2,700 bytes.
IDENTITY_MAX_BYTES = 256


def identity_problem(identity: object) -> str | None:
    """What is wrong with `identity` as a caller's identity (`IDENTITY_MAX_BYTES`, printable),
    or None. The one check of every sign-in (`server.callers.auth.Caller.signed_in`) and of the API
    keys' owners at start."""
    if not isinstance(identity, str) or not identity:
        return "it is not a non-empty string"
    if len(identity.encode("utf-8", "surrogatepass")) > IDENTITY_MAX_BYTES:
        return f"it is longer than {IDENTITY_MAX_BYTES} bytes (UTF-8)"
    if not identity.isprintable():
        return "it holds a control or other non-printable character"
    return None


# -- defaults of settings (RUNSTREAM_MAX_*) -------------------------------------------------

# A request's head (request line and headers), in bytes: past it, 431 before any route runs.
# Browsers send a few KiB (cookies included); Node.js refuses past 16 KiB, nginx past 32 KiB.
DEFAULT_MAX_HEADER_BYTES = 64 * 1024

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
# What one replay of a LangGraph stream may write (a stream's frames from before the viewer
# attached); past it the stream ends with an `error`. Twice the stream's own bound: its events
# in LangGraph's frames, whose chunks repeat the run's metadata, fit unless that is large.
DEFAULT_MAX_REPLAY_BYTES = 2 * DEFAULT_MAX_RUN_STREAM_BYTES
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
DEFAULT_MAX_PENDING_WEBHOOKS = 1000  # the caller's webhook deliveries not settled yet
DEFAULT_MAX_ASSISTANT_VERSIONS = 100  # versions kept of one assistant (each PATCH adds one)
# Every write that is not a submit (store puts and deletes, thread copies and state writes,
# patches, deletes, cancels), any 60 s.
DEFAULT_MAX_WRITES_PER_MINUTE = 600
# Requests whose query the caller shapes (store reads and searches, thread, assistant and cron
# searches and counts, thread history), any 60 s.
DEFAULT_MAX_QUERIES_PER_MINUTE = 1200
# ... of those, how many one caller runs at once in one server process; the rest wait their turn.
DEFAULT_MAX_CONCURRENT_QUERIES = 2
# How long one such query may run before Postgres cancels it (its statement_timeout).
DEFAULT_QUERY_TIMEOUT_MS = 5000
# What one caller keeps in LangGraph's store: items, and bytes of their values.
DEFAULT_MAX_STORE_ITEMS = 10_000
DEFAULT_MAX_STORE_BYTES = 100 * 1024 * 1024
# Facts the memory assistant keeps of one user (runner/assistant): past them it remembers nothing
# new and says so. On without API keys too: one long message could otherwise state thousands.
DEFAULT_MAX_FACTS = 200
# Checkpoints: a state write or a copy is refused on a thread with this many checkpoints, or for
# a caller whose threads' checkpoints hold this many bytes (runs themselves are never stopped).
DEFAULT_MAX_THREAD_CHECKPOINTS = 10_000
DEFAULT_MAX_CHECKPOINT_BYTES = 1024 * 1024 * 1024
