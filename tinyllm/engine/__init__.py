"""Serving many requests at once: requests, scheduler, KV block manager, runner and the engine loop."""
