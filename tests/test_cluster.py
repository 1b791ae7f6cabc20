"""The guarantees' tests again, on a Redis Cluster: `pytest -m cluster` (issue 12).

The same test functions as on one Redis, collected here a second time with the test Redis
replaced by a three-master cluster (`redis_cluster_url`: tests/redis_cluster.py, or
`RUNSTREAM_TEST_REDIS_CLUSTER_URL`). runstream is given the URL of one node and finds the
rest itself, as a deployment would be configured. Covered: submit, stream and attach; reconnect
with Last-Event-ID; cancel; interrupt and resume; several runs at once across slots; two
servers; idempotency; stream tokens; thread deletion; the submit quota; and, marked `fault`
as well (so `pytest -m fault` runs them one at a time with the other fault tests), workers
killed, paused and stopped, servers killed, a write tool's worker killed, a stuck viewer, and
the chaos test. `TestOneSlotPerScript` checks the key layout itself (keys.py): what one script
or MULTI touches is on one slot.

Left out: tests that read or write Redis themselves with a plain client on one node (those
that check key names, TTLs or client lists), and the fault tests of a private redis-server
that they kill or flush.
"""

from __future__ import annotations

import uuid

import pytest
from arq.constants import (
    in_progress_key_prefix,
    job_key_prefix,
    result_key_prefix,
    retry_key_prefix,
)
from redis.crc import key_slot

from stream_store.keys import KeySpace
from tests import test_faults as faults
from tests.test_caller_limits import TestSubmitsPerMinute
from tests.test_control import TestApproval, TestCancel, TestMultitask
from tests.test_fanout import TestManyViewers
from tests.test_idempotency import TestIdempotencyKey
from tests.test_isolation import TestStreamTokens, alice_data, callers
from tests.test_reconnect import TestReconnectFinishedRun, TestReconnectLiveRun
from tests.test_runs import TestRunStream
from tests.test_stream_catch_up import (
    test_retry_sends_messages_the_checkpoint_has_and_the_stream_lacks,
)
from tests.test_thread_delete import TestConcurrentDeletes, TestDeleteIsAtomic

pytestmark = pytest.mark.cluster

__all__ = [
    "TestApproval",
    "TestCancel",
    "TestConcurrentDeletes",
    "TestDeleteIsAtomic",
    "TestIdempotencyKey",
    "TestManyViewers",
    "TestMultitask",
    "TestReconnectFinishedRun",
    "TestReconnectLiveRun",
    "TestRunStream",
    "TestStreamTokens",
    "TestSubmitsPerMinute",
    "alice_data",
    "callers",
    "test_retry_sends_messages_the_checkpoint_has_and_the_stream_lacks",
]


class TestOneSlotPerScript:
    """On a cluster, the keys that one script or MULTI touches hash to one slot."""

    KEYS = KeySpace("rs", shards=16)

    def test_a_runs_keys_share_its_shards_slot_and_runs_spread_over_all_shards(self) -> None:
        shards = set()
        for run_id in (str(uuid.uuid4()) for _ in range(1000)):
            run_keys = [
                self.KEYS.run_events(run_id),
                self.KEYS.run_record(run_id),
                self.KEYS.run_cancel(run_id),
                self.KEYS.run_repair(run_id),
            ]
            assert len({key_slot(key.encode()) for key in run_keys}) == 1, run_keys
            shards.add(self.KEYS.shard(run_id))
        assert shards == set(range(16))

    def test_the_queue_its_jobs_arq_keys_and_the_beats_share_a_slot(self) -> None:
        run_id = str(uuid.uuid4())
        job_id = self.KEYS.job_id(run_id, 3)
        assert self.KEYS.run_of_job(job_id) == run_id
        deployment_keys = [
            self.KEYS.queue(),
            self.KEYS.worker_health(),
            self.KEYS.workers(),
            self.KEYS.worker_beat("w1"),
            *(prefix + job_id for prefix in (job_key_prefix, in_progress_key_prefix)),
            *(prefix + job_id for prefix in (retry_key_prefix, result_key_prefix)),
        ]
        assert len({key_slot(key.encode()) for key in deployment_keys}) == 1, deployment_keys

    def test_one_redis_keeps_the_names_it_always_had(self) -> None:
        keys = KeySpace("rs")
        assert keys.run_events("r1") == "rs:run:{r1}:events"
        assert (keys.queue(), keys.workers()) == ("rs:queue", "rs:workers")
        assert keys.job_id("r1", 2) == "r1:2" and keys.run_of_job("r1:2") == "r1"
        assert {keys.shard(str(uuid.uuid4())) for _ in range(100)} == {0}


@pytest.fixture(scope="module")
def service_urls(service_urls: tuple[str, str], redis_cluster_url: str) -> tuple[str, str]:
    """The session's Postgres, the cluster for Redis."""
    return redis_cluster_url, service_urls[1]


@pytest.fixture
def fault_redis_url(redis_cluster_url: str) -> str:
    return redis_cluster_url


fault_settings = faults.fault_settings
cluster_settings = faults.cluster_settings


@pytest.mark.fault
class TestWorkerKilled(faults.TestWorkerKilled):
    pass


@pytest.mark.fault
class TestPausedWorker(faults.TestPausedWorker):
    pass


@pytest.mark.fault
class TestServerRestart(faults.TestServerRestart):
    pass


@pytest.mark.fault
class TestWriteToolOnce(faults.TestWriteToolOnce):
    pass


@pytest.mark.fault
class TestStuckViewer(faults.TestStuckViewer):
    pass


@pytest.mark.fault
class TestShutdown(faults.TestShutdown):
    pass


@pytest.mark.fault
class TestChaos(faults.TestChaos):
    pass
