"""What one server process holds: the shared services, plus the server's own components."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

from opentelemetry.trace import Tracer

from runner.graphs import GraphRegistry
from runner.store_index import check_embeddings, store_options
from stream_store.assistant_records import AssistantRecords
from stream_store.cron_records import CronRecords
from stream_store.deployment_metrics import DeploymentGauges
from stream_store.metrics import GraphLabels, ServerMetrics
from stream_store.services import Services, open_services
from stream_store.settings import Settings
from stream_store.thread_records import ThreadRecords

from .auth import SignIn, StreamTokens
from .caller_queries import CallerQueries, open_caller_queries
from .fanout import StreamFollower
from .run_reads import RunReads
from .sign_in import sign_in_for
from .thread_watch import ThreadWatch

__all__ = ["Resources", "open_resources"]


@dataclass
class Resources(Services):
    follower: StreamFollower  # the process's one reader of live streams
    graphs: GraphRegistry
    tokens: StreamTokens
    sign_in: SignIn  # how a request's caller is known (server/sign_in.py)
    metrics: ServerMetrics  # runstream's part of /metrics
    deployment: DeploymentGauges  # read from storage when /metrics is scraped
    run_reads: RunReads  # the requests' reads of a run by id, batched
    thread_watch: ThreadWatch  # the new runs of the threads that idle thread streams wait on
    queries: CallerQueries  # the store's and the searches' connections, bounded per caller
    # When the graphs were loaded: the LangGraph API's assistants were "created" then.
    started_at: datetime = dataclasses.field(default_factory=lambda: datetime.now(UTC))

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
    if graphs is None:
        graphs = GraphRegistry.from_settings(settings)
    sign_in = sign_in_for(settings, graphs)
    tokens = StreamTokens(settings, project_auth=graphs.auth is not None)
    store = store_options(graphs.project)
    await check_embeddings(store, graphs.project)
    async with (
        open_services(settings, tracer=tracer, store=store) as services,
        open_caller_queries(settings) as queries,
    ):
        metrics = ServerMetrics(GraphLabels(graphs.names()))
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
        try:
            fields = {f.name: getattr(services, f.name) for f in dataclasses.fields(services)}
            yield Resources(
                **fields,
                follower=follower,
                graphs=graphs,
                tokens=tokens,
                sign_in=sign_in,
                metrics=metrics,
                deployment=deployment,
                run_reads=RunReads(services.run_records),
                thread_watch=thread_watch,
                queries=queries,
            )
        finally:
            await thread_watch.stop()
            await follower.stop()
