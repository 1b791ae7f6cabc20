"""Streaming runs to clients: attach, the fan-out of one run's stream to many
connections, the feed that reads it, the SSE response, a thread's watch."""
