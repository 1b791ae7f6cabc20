"""Bounds on what a caller sends: every one is named here, with its unit.

The fixed bounds are constants. Those an operator may want to change are `Settings` fields
(`RUNSTREAM_MAX_*`) whose defaults are the `DEFAULT_*` constants below; only
`stream_store.settings` reads them from the environment. The server checks every bound before it
records anything (`server.inputs`); the worker applies again the ones it acts on (the fake
model's delay). docs/protocol.md section 3.1 lists them all.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_MAX_MESSAGE_CHARS",
    "DEFAULT_MAX_METADATA_BYTES",
    "DEFAULT_MAX_METADATA_KEYS",
    "DEFAULT_MAX_RESUME_BYTES",
    "DEFAULT_MAX_RUN_MESSAGES",
    "GRAPH_NAME_MAX_CHARS",
    "IDEMPOTENCY_KEY_MAX_CHARS",
    "JSON_MAX_DEPTH",
    "MAX_FAKE_TOKEN_DELAY_MS",
    "MESSAGE_ID_MAX_CHARS",
    "METADATA_KEY_MAX_CHARS",
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

# -- defaults of settings (RUNSTREAM_MAX_*) -------------------------------------------------

DEFAULT_MAX_MESSAGE_CHARS = 100_000  # characters (code points) of one input message's content
DEFAULT_MAX_RUN_MESSAGES = 1000  # input messages of one run
DEFAULT_MAX_METADATA_BYTES = 16 * 1024  # run or thread metadata, encoded as compact JSON
DEFAULT_MAX_METADATA_KEYS = 64  # top-level keys of run or thread metadata
DEFAULT_MAX_RESUME_BYTES = 64 * 1024  # a resume value, encoded as compact JSON
