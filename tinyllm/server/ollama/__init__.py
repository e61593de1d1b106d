"""Ollama's API over the same engine: /api/chat and /api/generate (newline-delimited JSON unless stream is
false, `format`, `tools`, `options`), /api/embed (and the older /api/embeddings), /api/tags, /api/show,
/api/ps and /api/version. routes.py registers them; requests.py turns a request into the OpenAI request it
amounts to; options.py maps `options`; answer.py runs and shapes the answer; models.py describes the model."""

from .routes import add_ollama_routes

__all__ = ["add_ollama_routes"]
