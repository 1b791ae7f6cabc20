"""What one server process holds: the shared services, plus the server's own components."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

from langgraph.pregel import Pregel
from opentelemetry.trace import Tracer

from project.graph_catalog import GraphCatalog
from project.store_index import check_embeddings, store_options
from runner.graph_registry import GraphRegistry
from server.callers.auth import SignIn, StreamTokens
from server.callers.caller_queries import CallerQueries, open_caller_queries
from server.callers.sign_in import sign_in_for
from server.streaming.fanout import StreamFollower
from server.streaming.thread_watch import ThreadWatch
from stream_store.assistant_records import AssistantRecords
from stream_store.cron_records import CronRecords
from stream_store.deployment_metrics import DeploymentGauges
from stream_store.metrics import GraphLabels, ServerMetrics
from stream_store.services import Services, open_services
from stream_store.settings import Settings
from stream_store.thread_records import ThreadRecords

from .readiness import Readiness
from .run_reads import RunReads

__all__ = ["Resources", "open_resources"]


@dataclass
class Resources(Services):
    follower: StreamFollower  # the process's one reader of live streams
    graphs: GraphCatalog  # what a submit is checked against: names, `configurable` keys
    registry: GraphRegistry  # the graphs themselves, for the LangGraph API's reads
    tokens: StreamTokens
    sign_in: SignIn  # how a request's caller is known (server/callers/sign_in.py)
    metrics: ServerMetrics  # runstream's part of /metrics
    deployment: DeploymentGauges  # read from storage when /metrics is scraped
    run_reads: RunReads  # the requests' reads of a run by id, batched
    readiness: Readiness  # `/readyz`'s probes, which log a dependency's change of state
    thread_watch: ThreadWatch  # the new runs of the threads that idle thread streams wait on
    queries: CallerQueries  # the store's and the searches' connections, bounded per caller
    # When the graphs were loaded: the LangGraph API's assistants were "created" then.
    started_at: datetime = dataclasses.field(default_factory=lambda: datetime.now(UTC))

    async def graph_for_reading(self, name: str) -> Pregel:
        """Graph `name` on the process's checkpointer, for its drawing, schemas and threads'
        states (`GraphRegistry.graph_for_reading`).

        Raises:
            UnknownGraph: no graph is registered under `name`.
        """
        return await self.registry.graph_for_reading(name, self.checkpointer)

    # The records again, on the connections for `owner`'s own queries (a turn, a timeout):
    # for the searches and counts whose filters the caller writes.

    def searched_threads(self, owner: str) -> ThreadRecords:
        return ThreadRecords(self.queries.for_caller(owner))

    def searched_assistants(self, owner: str) -> AssistantRecords:
        return AssistantRecords(self.queries.for_caller(owner))

    def searched_crons(self, owner: str) -> CronRecords:
        return CronRecords(self.queries.for_caller(owner))


@contextlib.asynccontextmanager
async def open_resources(
    settings: Settings, *, tracer: Tracer | None = None, graphs: GraphRegistry | None = None
) -> AsyncIterator[Resources]:
    """Open the services, the stream reader and the thread watcher; close them in reverse
    order. `graphs` None: the graphs are loaded from `settings` here."""
    registry = graphs if graphs is not None else GraphRegistry.from_settings(settings)
    catalog = registry.catalog()  # every graph imported by now: none is per request
    sign_in = sign_in_for(settings, registry.auth)
    tokens = StreamTokens(settings, project_auth=registry.auth is not None)
    store = store_options(registry.project)
    await check_embeddings(store, registry.project)
    async with (
        open_services(settings, tracer=tracer, store=store) as services,
        open_caller_queries(settings) as queries,
    ):
        metrics = ServerMetrics(GraphLabels(catalog.names()))
        metrics.watch_pool(services.pool)
        # The queue's node: the queue and the workers' beats are there on a Redis Cluster too.
        deployment = DeploymentGauges(
            services.pool, services.clients.queue, services.keys, metrics.graphs
        )
        metrics.add(deployment)
        follower = StreamFollower(
            services.clients.node_url,
            services.events,
            queue_size=settings.viewer_queue_size,
            cut_off_s=settings.viewer_cut_off_s,
            metrics=metrics.fanout,
        )
        metrics.follow(lambda: follower.viewer_count, lambda: follower.run_count)
        await follower.start()
        thread_watch = ThreadWatch(services.thread_records, closing=lambda: follower.closing)
        await thread_watch.start()
        run_reads = RunReads(services.run_records)
        try:
            fields = {f.name: getattr(services, f.name) for f in dataclasses.fields(services)}
            yield Resources(
                **fields,
                follower=follower,
                graphs=catalog,
                registry=registry,
                tokens=tokens,
                sign_in=sign_in,
                metrics=metrics,
                deployment=deployment,
                run_reads=run_reads,
                readiness=Readiness(services.redis, services.pool),
                thread_watch=thread_watch,
                queries=queries,
            )
        finally:
            await run_reads.aclose()
            await thread_watch.stop()
            await follower.stop()
