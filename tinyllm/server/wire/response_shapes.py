"""The shapes of /v1/responses answers: the response object (an assistant message holding one output_text
part, and the function calls the answer makes) and the server-sent events that build it, in the order OpenAI's
SDK reads them:

    response.created → response.in_progress → response.output_item.added → response.content_part.added
    → response.output_text.delta … → response.output_text.done → response.content_part.done
    → response.output_item.done → response.completed (or response.incomplete, when max_output_tokens cut it)

A reasoning model's answer first streams its reasoning item (endpoints/response_stream.py: output_item.added,
reasoning_text.delta …, reasoning_text.done, output_item.done), then its message at output 1.
An answer whose items come whole (with tools) sends, for each item,
output_item.added, its content (a reasoning item's reasoning_text.delta and .done; a message's part and text; a
call's function_call_arguments.delta and .done) and output_item.done. A reasoning item, OpenAI's shape with the
text in `content`, comes before the message.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field

FINISHED = {"stop": "completed", "length": "incomplete"}  # engine finish reason -> response status


@dataclass
class ResponseMeta:
    """What every snapshot of one response repeats."""

    id: str
    message_id: str
    model: str
    created_at: int
    settings: dict  # instructions, max_output_tokens, temperature, top_p as the request set them
    sequence: int = field(default=0)
    reasoning_id: str = field(default_factory=lambda: f"rs_{secrets.token_hex(16)}")

    def next_number(self) -> int:
        self.sequence += 1
        return self.sequence - 1


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int, reasoning_tokens: int = 0) -> dict:
    return {
        "input_tokens": prompt_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens},
        "output_tokens": completion_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": prompt_tokens + completion_tokens,
    }


def text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(meta: ResponseMeta, text: str | None, status: str) -> dict:
    content = [] if text is None else [text_part(text)]
    return {"type": "message", "id": meta.message_id, "status": status, "role": "assistant", "content": content}


def response_object(meta: ResponseMeta, status: str, output: list, usage_: dict | None = None) -> dict:
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    return {
        "id": meta.id,
        "object": "response",
        "created_at": meta.created_at,
        "status": status,
        "model": meta.model,
        "output": output,
        "error": None,
        "incomplete_details": incomplete,
        "parallel_tool_calls": False,
        "tool_choice": "none",
        "tools": [],
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        **meta.settings,
        "usage": usage_,
    }


def function_call_item(call_id: str, name: str, arguments: str) -> dict:
    return {
        "type": "function_call",
        "id": f"fc_{secrets.token_hex(16)}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def reasoning_item(meta: ResponseMeta, text: str, status: str) -> dict:
    return {
        "type": "reasoning",
        "id": meta.reasoning_id,
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "status": status,
    }


def finished_response(
    meta: ResponseMeta,
    text: str | None,
    finish_reason: str | None,
    usage_: dict,
    calls: list[tuple] = (),
    reasoning: str | None = None,
) -> dict:
    """The whole response: the reasoning (when the model thought), the message (unless the answer is only calls)
    and each (call_id, name, arguments)."""
    status = FINISHED.get(finish_reason or "stop", "completed")
    item_status = "completed" if status == "completed" else "incomplete"
    thought = [reasoning_item(meta, reasoning, item_status)] if reasoning is not None else []
    message = [message_item(meta, text or "", item_status)] if text is not None or not calls else []
    return response_object(meta, status, [*thought, *message, *(function_call_item(*c) for c in calls)], usage_)


def event(meta: ResponseMeta, kind: str, **fields) -> str:
    """One server-sent event, named as its type."""
    body = {"type": kind, "sequence_number": meta.next_number(), **fields}
    return f"event: {kind}\ndata: {json.dumps(body, ensure_ascii=False)}\n\n"


def opening_events(meta: ResponseMeta, with_message: bool = True) -> list[str]:
    """The response started, and (with_message) its message, whose text deltas follow."""
    started = response_object(meta, "in_progress", [])
    events = [event(meta, "response.created", response=started), event(meta, "response.in_progress", response=started)]
    return [*events, *message_start(meta, 0)] if with_message else events


def message_start(meta: ResponseMeta, index: int) -> list[str]:
    """The message item at output `index` opens; its text deltas follow."""
    at = dict(item_id=meta.message_id, output_index=index, content_index=0)
    return [
        event(meta, "response.output_item.added", output_index=index, item=message_item(meta, None, "in_progress")),
        event(meta, "response.content_part.added", **at, part=text_part("")),
    ]


def delta_event(meta: ResponseMeta, text: str, index: int = 0) -> str:
    return event(
        meta, "response.output_text.delta", item_id=meta.message_id, output_index=index, content_index=0, delta=text,
        logprobs=[],
    )  # fmt: skip


def reasoning_start(meta: ResponseMeta) -> str:
    """The reasoning item opens, as output 0; its text deltas follow."""
    added = {**reasoning_item(meta, "", "in_progress"), "content": []}
    return event(meta, "response.output_item.added", output_index=0, item=added)


def reasoning_delta(meta: ResponseMeta, text: str) -> str:
    return event(
        meta, "response.reasoning_text.delta", item_id=meta.reasoning_id, output_index=0, content_index=0, delta=text
    )


def reasoning_end(meta: ResponseMeta, text: str, status: str = "completed") -> list[str]:
    at = dict(item_id=meta.reasoning_id, output_index=0, content_index=0)
    item = reasoning_item(meta, text, status)
    return [
        event(meta, "response.reasoning_text.done", **at, text=text),
        event(meta, "response.output_item.done", output_index=0, item=item),
    ]


def closing_events(meta: ResponseMeta, final: dict, streamed_message: bool = True) -> list[str]:
    """The streamed message's end (or every item, whole), then the finished response."""
    last = "response.completed" if final["status"] == "completed" else "response.incomplete"
    if not streamed_message:
        items = [e for i, item in enumerate(final["output"]) for e in _whole_item_events(meta, i, item)]
        return [*items, event(meta, last, response=final)]
    index = next(i for i, item in enumerate(final["output"]) if item["type"] == "message")
    item = final["output"][index]
    return [*_message_end(meta, item, index), event(meta, "response.output_item.done", output_index=index, item=item),
            event(meta, last, response=final)]  # fmt: skip


def _message_end(meta: ResponseMeta, item: dict, index: int) -> list[str]:
    text = item["content"][0]["text"]
    at = dict(item_id=item["id"], output_index=index, content_index=0)
    return [
        event(meta, "response.output_text.done", **at, text=text, logprobs=[]),
        event(meta, "response.content_part.done", **at, part=text_part(text)),
    ]


def _whole_item_events(meta: ResponseMeta, index: int, item: dict) -> list[str]:
    """One finished output item's events: added, its content at once, done."""
    added = {**item, "status": "in_progress"}
    if item["type"] == "message":
        added["content"] = []
        at = dict(item_id=item["id"], output_index=index, content_index=0)
        text = item["content"][0]["text"]
        body = [
            event(meta, "response.content_part.added", **at, part=text_part("")),
            event(meta, "response.output_text.delta", **at, delta=text, logprobs=[]),
            event(meta, "response.output_text.done", **at, text=text, logprobs=[]),
            event(meta, "response.content_part.done", **at, part=text_part(text)),
        ]
    elif item["type"] == "reasoning":
        added["content"] = []
        at = dict(item_id=item["id"], output_index=index, content_index=0)
        text = item["content"][0]["text"]
        body = [
            event(meta, "response.reasoning_text.delta", **at, delta=text),
            event(meta, "response.reasoning_text.done", **at, text=text),
        ]
    else:
        added["arguments"] = ""
        at = dict(item_id=item["id"], output_index=index)
        body = [
            event(meta, "response.function_call_arguments.delta", **at, delta=item["arguments"]),
            event(meta, "response.function_call_arguments.done", **at, arguments=item["arguments"]),
        ]
    return [
        event(meta, "response.output_item.added", output_index=index, item=added),
        *body,
        event(meta, "response.output_item.done", output_index=index, item=item),
    ]
