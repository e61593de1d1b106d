"""What Ollama's clients ask about the models: GET /api/tags (the models served here, loaded or not), POST
/api/show, GET /api/ps (the models loaded, and when each will unload) and GET /api/version (tinyllm's).

No file-system path is shown. `digest` is the SHA-256 of the model's file (loading/digest.py: hashed once, off
the event loop, on the first request that shows it), absent for a model built in memory. A model not loaded is
described from its file's header (loading/file_summary.py).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from ... import __version__
from ..state import Ready

CAPABILITIES = ["completion", "tools", "embedding"]
NEVER = "2999-12-31T23:59:59Z"  # expires_at of /api/ps for a model kept loaded (keep_alive < 0)


def parameter_size(n: int) -> str:
    """134515008 -> "135M", as Ollama labels models."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def quantization_level(weight_types: dict) -> str:
    """The format most of the model's matrices are stored in (float32 for a model built in memory)."""
    quantized = {k: v for k, v in weight_types.items() if k not in ("F32", "F16", "BF16")}
    chosen = quantized or weight_types
    return max(chosen, key=chosen.get) if chosen else "F32"


def modified_at(path: str | None) -> str:
    stamp = os.path.getmtime(path) if path and os.path.exists(path) else datetime.now(timezone.utc).timestamp()
    return _iso(stamp)


def _iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).isoformat().replace("+00:00", "Z")


def details(info: dict) -> dict:
    return {
        "parent_model": "",
        "format": info["format"],  # gguf, or the folder / in-memory form tinyllm loaded
        "family": info["family"],
        "families": [info["family"]],
        "parameter_size": parameter_size(info["parameters"]),
        "quantization_level": quantization_level(info["weight_types"]),
    }


def _with_digest(entry: dict, digest: str | None) -> dict:
    return {**entry, "digest": digest} if digest else entry


@dataclass(frozen=True)
class Listed:
    """One model as the listings show it: `info` is the loaded LLM's info() or its file's summary."""

    name: str
    path: str | None
    info: dict
    digest: str | None


def tag(model: Listed) -> dict:
    entry = {
        "name": model.name,
        "model": model.name,
        "modified_at": modified_at(model.path),
        "size": model.info["weight_bytes"],
        "details": details(model.info),
    }
    return _with_digest(entry, model.digest)


def running(model: Listed, context_length: int, on_gpu: bool, expires_in_s: float | None) -> dict:
    """An /api/ps entry; expires_in_s: seconds until it unloads if left idle (None: it stays)."""
    entry = {
        "name": model.name,
        "model": model.name,
        "size": model.info["weight_bytes"],
        "details": details(model.info),
        "expires_at": NEVER if expires_in_s is None else _iso(time.time() + expires_in_s),
        "size_vram": model.info["weight_bytes"] if on_gpu else 0,
        "context_length": context_length,
    }
    return _with_digest(entry, model.digest)


def parameters(ctx: Ready) -> str:
    """The model's defaults as a Modelfile's PARAMETER lines name them: its stop tokens."""
    texts = dict.fromkeys(ctx.tokenizer.token_text(i) for i in ctx.parts.eos_ids)
    return "\n".join(f"stop {json.dumps(t, ensure_ascii=False)}" for t in texts if t)


def modelfile(ctx: Ready, params: str, license_text: str | None) -> str:
    """A Modelfile that describes the served model (its name, not its path)."""
    lines = [f"FROM {ctx.model_name}"]
    if ctx.tokenizer.chat_template:
        lines.append(f'TEMPLATE """{ctx.tokenizer.chat_template}"""')
    lines += [f"PARAMETER {p}" for p in params.splitlines()]
    if license_text:
        lines.append(f'LICENSE """{license_text}"""')
    return "\n".join(lines) + "\n"


def show(ctx: Ready, info: dict, license_text: str | None = None) -> dict:
    arch = info["architecture"]
    model_info = {
        "general.architecture": arch,
        "general.parameter_count": info["parameters"],
        f"{arch}.context_length": info["context_length"],
        f"{arch}.embedding_length": info["hidden_size"],
        f"{arch}.block_count": info["layers"],
        f"{arch}.attention.head_count": info["heads"],
        f"{arch}.attention.head_count_kv": info["kv_heads"],
        f"{arch}.rope.freq_base": info["rope_theta"],
        f"{arch}.vocab_size": info["vocab_size"],
    }
    params = parameters(ctx)
    shown = {
        "modelfile": modelfile(ctx, params, license_text),
        "parameters": params,
        "template": ctx.tokenizer.chat_template or "",
        "details": details(info),
        "model_info": model_info,
        "capabilities": CAPABILITIES,
        "modified_at": modified_at(ctx.path),
    }
    return {**shown, "license": license_text} if license_text else shown


def version() -> dict:
    return {"version": __version__}
