"""runstream's own HTTP API, `/v1` (docs/protocol.md): runs and threads."""
