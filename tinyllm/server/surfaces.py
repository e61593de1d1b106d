"""The routes for tools people run on their own machines, beside OpenAI's API: /v1/embeddings, Ollama's API
under /api/, and the chat page at /; embeddings on both APIs share the model's Embedder (one queue, one worker
thread per model)."""

from __future__ import annotations

from fastapi import FastAPI

from .endpoints.chat_page import add_chat_page
from .endpoints.embeddings import add_embedding_routes
from .ollama import add_ollama_routes
from .transport.body import add_body_schemas
from .wire.protocol import EmbeddingRequest


def add_local_routes(app: FastAPI, auth: list, ready, state) -> None:
    """`state`: the app's ServerState (Ollama's routes list and unload its models)."""
    add_embedding_routes(app, auth, ready)
    add_ollama_routes(app, auth, ready, state)
    add_chat_page(app)
    add_body_schemas(app, [EmbeddingRequest])
