"""The wire format: request and response bodies in OpenAI's shapes, logprobs, errors, streamed tool-call deltas,
and client text clipped for errors and logs."""
