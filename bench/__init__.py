"""The runstream benchmark suite (`./scripts/bench`, issue 5).

Each scenario in `bench.scenarios` starts real `runstream serve` / `runstream worker` processes
on its own Postgres schema and Redis key prefix, drives them over HTTP and SSE from the bench
process (and, for load, from client processes), and reports measured figures next to a
baseline measured in the same invocation: the in-process floor (`floor`) and raw Redis
(`redis`). Nothing in a figure is hard-coded; a missed target shows as `no`.
"""
