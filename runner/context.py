"""The typed worker context: what arq's `ctx` holds once `startup` has filled it."""

from __future__ import annotations

import asyncio
from typing import TypedDict

from arq.connections import ArqRedis
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from stream_store.connections import PgPool
from stream_store.lifecycle import RunLifecycle
from stream_store.log import EventLog
from stream_store.queue import RunQueue
from stream_store.records import Records
from stream_store.settings import Settings

from .graphs import GraphRegistry
from .tools import ToolLedger

__all__ = ["WorkerContext"]


class WorkerContext(TypedDict, total=False):
    # filled by arq
    redis: ArqRedis
    job_id: str
    job_try: int
    # filled by runner.worker.startup
    settings: Settings
    pool: PgPool
    checkpointer: AsyncPostgresSaver
    records: Records
    events: EventLog
    queue: RunQueue
    lifecycle: RunLifecycle
    graphs: GraphRegistry
    ledger: ToolLedger
    running: dict[str, asyncio.Task[None]]
    cancelling: set[str]
    lost: set[str]
    settling: set[str]
    reaper: asyncio.Task[None]
    listener: asyncio.Task[None]
    wake: asyncio.Event  # set to make the worker read the queue now
