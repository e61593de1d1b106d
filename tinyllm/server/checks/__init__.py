"""Request checking: sampling parameters, prompts, structured outputs, tools, fields not honoured, and the cheap
checks run before a request costs anything (admission)."""
