"""Storage shared by servers and workers: run streams on Redis, run records on Postgres."""
