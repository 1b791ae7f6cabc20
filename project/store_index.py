"""A project's `store.index` and `store.ttl` as the store's options: its embeddings resolved and
checked once at start-up, as LangGraph's server resolves them (`langgraph_api/graph.py`
`resolve_embeddings`).

`embed` is either a file and a name in it (`./embeddings.py:embed`: a `.py:` tells them apart,
as LangGraph does), whose attribute is LangChain `Embeddings` or a function, sync or async,
from a list of texts to a list of vectors; or a `provider:model` handed to LangChain's
`init_embeddings`, which lives in the `langchain` package.
"""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path

import structlog
from langchain_core.embeddings import Embeddings
from langgraph.store.base import TTLConfig, ensure_embeddings

from stream_store.store import StoreOptions, index_config

from .graph_loading import import_source
from .langgraph_json import GraphSource, Project, ProjectError, StoreIndexSpec

__all__ = ["check_embeddings", "load_embeddings", "store_options"]

logger = structlog.get_logger()

_KEY = "store.index.embed"
_PROBE_TIMEOUT_S = 30.0


def store_options(project: Project | None) -> StoreOptions:
    """The store's options for `project` (none: runstream's defaults), its embeddings loaded.

    Raises:
        ProjectError: `store.index.embed` cannot be loaded.
    """
    if project is None or (project.store_index is None and project.store_ttl is None):
        return StoreOptions()
    index = None
    if project.store_index is not None:
        spec = project.store_index
        index = index_config(spec.dims, load_embeddings(spec, project.file), spec.fields)
    spec_ttl = project.store_ttl
    if spec_ttl is None:
        return StoreOptions(index=index)
    ttl = TTLConfig(
        refresh_on_read=spec_ttl.refresh_on_read,
        default_ttl=spec_ttl.default_ttl,
        omit_expired=True,
    )
    interval_s = (spec_ttl.sweep_interval_minutes or 60) * 60
    return StoreOptions(index=index, ttl=ttl, sweep_interval_s=interval_s)


def load_embeddings(spec: StoreIndexSpec, file: Path) -> Embeddings:
    """`spec.embed` as LangChain `Embeddings`.

    Raises:
        ProjectError: the file or function is missing or not callable, or a `provider:model`
            cannot be made (the `langchain` package or the provider's is missing, say).
    """
    embed = spec.embed
    if ".py:" not in embed:
        return _provider_embeddings(embed, file)
    where, _, _ = embed.rpartition(":")
    if "/" not in where:
        embed = f"./{embed}"  # a file beside langgraph.json, named without `./`
    source = GraphSource.parse(embed, key=_KEY, origin=str(file), base=file.parent)
    value = import_source(source).__dict__.get(source.attr)
    if value is None:
        raise ProjectError(file, _KEY, f"{source.where} has no {source.attr!r}")
    if isinstance(value, Embeddings):
        return value
    if not callable(value):
        raise ProjectError(
            file,
            _KEY,
            f"{source.where}:{source.attr} is a {type(value).__name__}, not Embeddings or a"
            " function from a list of texts to a list of vectors",
        )
    return ensure_embeddings(value)


def _provider_embeddings(embed: str, file: Path) -> Embeddings:
    """`provider:model` through LangChain's `init_embeddings`."""
    try:
        from langchain.embeddings import init_embeddings
    except ImportError:
        raise ProjectError(
            file,
            _KEY,
            f"{embed!r} names a provider and a model, which LangChain's init_embeddings makes"
            " into embeddings: install the langchain package (pip install langchain) and the"
            " provider's (e.g. langchain-openai), or name your own function as"
            " './file.py:name'",
        ) from None
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*init_embeddings.*beta")
            return init_embeddings(embed)
    except Exception as exc:
        cause = str(exc).splitlines()[0] if str(exc) else ""
        raise ProjectError(file, _KEY, f"{embed!r}: {type(exc).__name__}: {cause}") from None


async def check_embeddings(options: StoreOptions, project: Project | None) -> None:
    """Embed one text with the project's embeddings and compare its length with `dims`, so a
    model that does not match is found at start-up, not by the first put.

    An embeddings call that fails (the provider unreachable, say) only logs a warning: a
    process must be able to start while a provider is briefly down.

    Raises:
        ProjectError: the vector's length is not `store.index.dims`.
    """
    if options.index is None or project is None or project.store_index is None:
        return
    embeddings = options.index["embed"]
    assert isinstance(embeddings, Embeddings)  # `store_options` resolved it
    try:
        async with asyncio.timeout(_PROBE_TIMEOUT_S):
            vector = await embeddings.aembed_query("runstream checks the embeddings' size")
    except Exception as exc:
        logger.warning(
            "the project's embeddings could not be checked at start-up",
            embed=project.store_index.embed,
            error=f"{type(exc).__name__}: {str(exc)[:200]}",
        )
        return
    dims = project.store_index.dims
    if len(vector) != dims:
        raise ProjectError(
            project.file,
            "store.index.dims",
            f"is {dims}, but {project.store_index.embed} makes vectors of {len(vector)} dimensions",
        )
