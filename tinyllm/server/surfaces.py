"""The routes for tools people run on their own machines, beside OpenAI's API: /v1/embeddings, Ollama's API
under /api/, and the chat page at /; embeddings on both APIs share one Embedder (one queue, one worker thread)."""

from __future__ import annotations

from fastapi import FastAPI

from ..engine.embedding_queue import EmbeddingLimits
from .endpoints.chat_page import add_chat_page
from .endpoints.embeddings import Embedder, EmbeddingRequest, add_embedding_routes
from .ollama import add_ollama_routes
from .transport.body import add_body_schemas


def add_local_routes(app: FastAPI, auth: list, ready, embedding_limits: EmbeddingLimits | None = None) -> Embedder:
    """Adds the routes; the Embedder returned is the app's to close at shutdown."""
    embedder = Embedder(embedding_limits)
    add_embedding_routes(app, auth, ready, embedder)
    add_ollama_routes(app, auth, ready, embedder)
    add_chat_page(app)
    add_body_schemas(app, [EmbeddingRequest])
    return embedder
