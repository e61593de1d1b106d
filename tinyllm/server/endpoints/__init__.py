"""The routes: one module per endpoint (chat, completions, responses, tokenization, embeddings, the chat page),
with what chat and completions share (serving.py, request_group.py, echo.py)."""
