"""The one exception type for a user's mistake: a bad path, file, argument or request."""


class TinyLLMError(ValueError):
    """A user error. Its message is one sentence naming the bad value and what was expected."""


class EngineDown(RuntimeError):
    """The engine can run nothing any more (a tensor-parallel rank died or hung); its message says which."""
