"""Every size limit the server puts on what one request may ask for, in one place.

Each is checked before the work it bounds (parsing, validating, compiling a grammar, rendering the chat template,
tokenizing), and going over one is a 400 (413 for the body) whose message names the field and the limit. Limits
that follow the model (prompt text and ids against its context) live in admission.py; those of connections
(timeouts, open connections) in slow_clients.py.
"""

from __future__ import annotations

# ---- the body
MAX_BODY_BYTES = 16 << 20  # far above any prompt that fits a context, far below a memory problem
# Arrays and objects nested in a JSON body (and in a JSON schema sent as text): far deeper than any real request
# (a 20-level JSON schema inside response_format is ~45), far below where recursive code (the JSON parser,
# validation, schema compilers) runs out of stack.
MAX_JSON_DEPTH = 64

# ---- choices and prompts
MAX_N = 16  # choices per request: each is a sequence in the engine's batch
MAX_PROMPTS = 64  # prompts x n choices in one completions request: all of them join the batch at once
MAX_TOP_LOGPROBS = 20

# ---- stop strings (their automaton is built per request)
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 1024  # per stop string

# ---- constraints, checked before anything compiles
MAX_TOOLS = 128  # function tools in one request, as OpenAI's API allows
# The text the grammar engine compiles: a schema's JSON, a regex, a grammar, or the tools' parameter schemas
# together (they compile into one call grammar).
MAX_GRAMMAR_BYTES = 128 << 10
MAX_CHOICES = 1024  # strings of guided_choice / structured_outputs.choice
MAX_CHOICE_BYTES = 64 << 10  # their UTF-8 bytes together

# ---- logs: text a client controls (a grammar, a schema, a prompt) is cut to this in log lines
MAX_LOGGED_CHARS = 500
