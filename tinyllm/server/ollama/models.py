"""What Ollama's clients ask about the model: GET /api/tags (the models there are: this one), POST /api/show,
GET /api/ps (the models loaded: this one, for as long as the server runs) and GET /api/version (tinyllm's).

No file-system path is shown. `digest` is the SHA-256 of the model's file (loading/digest.py: hashed once, off
the event loop, on the first request that shows it), absent for a model built in memory.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone

from ... import __version__
from ..state import Ready

CAPABILITIES = ["completion", "tools", "embedding"]
NEVER = "2999-12-31T23:59:59Z"  # expires_at of /api/ps: the model stays loaded until the server stops


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


def modified_at(llm) -> str:
    path = str(getattr(llm, "path", "") or "")
    stamp = os.path.getmtime(path) if path and os.path.exists(path) else datetime.now(timezone.utc).timestamp()
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


def tags(ctx: Ready, info: dict, digest: str | None) -> dict:
    entry = {
        "name": ctx.model_name,
        "model": ctx.model_name,
        "modified_at": modified_at(ctx.llm),
        "size": info["weight_bytes"],
        "details": details(info),
    }
    return {"models": [_with_digest(entry, digest)]}


def running(ctx: Ready, info: dict, digest: str | None) -> dict:
    on_gpu = str(getattr(ctx.llm.model, "device", "cpu")).startswith("cuda")
    entry = {
        "name": ctx.model_name,
        "model": ctx.model_name,
        "size": info["weight_bytes"],
        "details": details(info),
        "expires_at": NEVER,
        "size_vram": info["weight_bytes"] if on_gpu else 0,
        "context_length": ctx.context_length,
    }
    return {"models": [_with_digest(entry, digest)]}


def parameters(ctx: Ready) -> str:
    """The model's defaults as a Modelfile's PARAMETER lines name them: its stop tokens."""
    texts = dict.fromkeys(ctx.tokenizer.token_text(i) for i in ctx.llm.eos_ids)
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
        "modified_at": modified_at(ctx.llm),
    }
    return {**shown, "license": license_text} if license_text else shown


def version() -> dict:
    return {"version": __version__}
