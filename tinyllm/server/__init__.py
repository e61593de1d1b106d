"""An OpenAI-compatible HTTP server over the continuous-batching engine (needs fastapi and uvicorn).

`create_app` is imported on first use, so `tinyllm.server.cli` can build the command line without
importing the web stack."""


def __getattr__(name: str):
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(name)


__all__ = ["create_app"]
