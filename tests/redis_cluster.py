"""The `cluster` tests' private three-master Redis Cluster (`pytest -m cluster`): the bench's
(bench/redis_cluster.py), which the `cluster` scenario starts too."""

from __future__ import annotations

from bench.redis_cluster import LocalRedisCluster

__all__ = ["LocalRedisCluster"]
