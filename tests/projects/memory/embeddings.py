"""Deterministic embeddings for the tests, offline: a hashed bag of words, L2-normalised, so
texts that share words are close (cosine similarity) and others are not."""

from __future__ import annotations

import hashlib
import math
import re

DIMS = 128


def embed_texts(texts: list[str]) -> list[list[float]]:
    return [_embed(text) for text in texts]


def _embed(text: str) -> list[float]:
    vector = [0.0] * DIMS
    for word in re.findall(r"[a-z]+", text.lower()):
        slot = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % DIMS
        vector[slot] += 1.0
    norm = math.sqrt(sum(x * x for x in vector))
    if not norm:  # no words: a fixed unit vector (a zero vector has no cosine)
        return [1.0] + [0.0] * (DIMS - 1)
    return [x / norm for x in vector]


def embed_short(texts: list[str]) -> list[list[float]]:
    """Vectors of fewer dimensions than the project says: refused at start-up."""
    return [vector[:32] for vector in embed_texts(texts)]


not_a_function = 3
