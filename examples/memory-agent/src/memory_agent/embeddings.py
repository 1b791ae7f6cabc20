"""The embeddings `store.index` names (`./src/memory_agent/embeddings.py:embeddings`).

`check_embedding_ctx_length=False` sends the texts as they are: by default `OpenAIEmbeddings`
counts tokens with tiktoken first, which downloads its encoding on first use (so fails
offline) and then sends token ids, which not every OpenAI-compatible server takes. Texts longer
than the model's context are then refused by the server instead of split.
"""

from __future__ import annotations

import os

from langchain_openai import OpenAIEmbeddings

embeddings = OpenAIEmbeddings(
    model=os.environ.get("MEMORY_AGENT_EMBEDDINGS", "text-embedding-3-small"),
    check_embedding_ctx_length=False,
)
