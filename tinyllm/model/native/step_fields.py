"""The native step's C structures, declared once: each field's name, C type and meaning. The build writes them
as C++ (`header()`, included by csrc/decode_args.h) and step_structs.py makes their ctypes mirror from the same
rows; csrc/layout.cpp reports the compiled layout so a test compares the two field by field. Plain Python: no
torch, no imports from the package, so that the build can read it apart from the rest.

A per-layer value crosses into C++ by one row of LAYER: its dataclass field (step_structs.LayerWeights), its
packing (by C type: a pointer takes a tensor's address, QW a quantized weight (or a float32 tensor: fmt 0), Proj a
list of them, a pointer to QW or Proj a list of those as a C array, int64_t an int or one of `choices`, double a
float) and its C++ member all come from that row.
"""

from __future__ import annotations

from dataclasses import dataclass

POINTER = "*"


@dataclass(frozen=True)
class Field:
    name: str
    ctype: str  # a C++ type: int64_t, double, QW, Proj or a pointer
    comment: str = ""
    nullable: bool = False  # the C++ takes null (a pointer) or 0 (a number) for "none"; Python passes None
    count: int = 0  # an array of this many, or 0: one
    choices: tuple[str, ...] = ()  # an int64_t that Python passes as one of these names: their index

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"a field name must be an identifier, got {self.name!r}")
        if self.choices and self.ctype != "int64_t":
            raise ValueError(f"choices need an int64_t field, {self.name} is {self.ctype}")

    @property
    def is_pointer(self) -> bool:
        return self.ctype.endswith(POINTER)


@dataclass(frozen=True)
class Struct:
    name: str
    comment: str
    fields: tuple[Field, ...]

    def field(self, name: str) -> Field:
        return next(f for f in self.fields if f.name == name)


I64, F64, FLOATS, ANY = "int64_t", "double", "const float*", "void*"
INDICES = "const int64_t*"

QW = Struct(
    "QW",
    "a weight kept as GGUF blocks: [n, k]",
    (
        Field("fmt", I64, "GGUF type id, or'ed with INT8_ACTIVATIONS / INT24_ACTIVATIONS (decode_args.h)"),
        Field("data", "const uint8_t*", "its blocks, or its packed form with 8-bit activations"),
        Field("stride", I64, "bytes a row"),
        Field("n", I64, "rows"),
        Field("k", I64, "columns"),
    ),
)

PROJ = Struct(
    "Proj",
    "a projection whose output rows are the parts' rows in order",
    (Field("part", "QW", count=3), Field("count", I64, "parts in use")),
)

LAYER = Struct(
    "LayerArgs",
    "one layer's weights, KV storage and options",
    (
        Field("attn_norm", FLOATS, "[C] before attention", nullable=True),
        Field("attn_out_norm", FLOATS, "[C] on attention's output (sandwich layers)", nullable=True),
        Field("mlp_norm", FLOATS, "[C] before the MLP", nullable=True),
        Field("mlp_out_norm", FLOATS, "[C] on the MLP's output (sandwich layers)", nullable=True),
        Field("q_norm", FLOATS, "[D] per query head before rotation", nullable=True),
        Field("k_norm", FLOATS, "[D] per key head before rotation", nullable=True),
        Field("qkv", "Proj", "rows stacked: [(H + 2 Hkv) D, C], up to 3 parts"),
        Field("gate_up", "Proj", "[2 I, C], up to 2 parts; count 0 with experts", nullable=True),
        Field("o", "QW", "[C, H D]"),
        Field("down", "QW", "[C, I]; data null with experts", nullable=True),
        Field("qkv_bias", FLOATS, "[(H + 2 Hkv) D]", nullable=True),
        Field("k_cache", ANY, "[slots, Hkv * D] of this layer, elements of ModelArgs::kv_type"),
        Field("v_cache", ANY, "[slots, Hkv * D]"),
        Field("k_scale", ANY, "q8_0 caches: [slots, Hkv * D / 32] float16 scales (kv.h)", nullable=True),
        Field("v_scale", ANY, "q8_0 caches: the values' scales", nullable=True),
        Field("window", I64, "keys visible to a query, its own included; 0 = all", nullable=True),
        Field("rope", I64, "which rotary table: 0 or 1"),
        Field("activation", I64, "of the gated MLP: 0 SiLU, 1 GELU (tanh form)", choices=("silu", "gelu_tanh")),
        Field("scale", F64, "of the attention logits q . k"),
        Field("softcap", F64, "of the attention logits: cap * tanh(logit / cap); 0 = none", nullable=True),
        # a mixture of experts in place of the dense MLP (moe.h); a dense layer has none of these
        Field("num_experts", I64, "E; 0 = the dense MLP", nullable=True),
        Field("router", "QW", "[E, C] the experts' scores (fmt 0: float32 rows)", nullable=True),
        Field("experts_gate_up", "const Proj*", "[E] each expert's [2 Ie, C], up to 2 parts", nullable=True),
        Field("experts_down", "const QW*", "[E] each expert's [C, Ie]", nullable=True),
        Field("top_k", I64, "experts a token runs through", nullable=True),
        Field("renormalize", I64, "1: the chosen experts' weights scaled to sum to one", nullable=True),
    ),
)

MODEL = Struct(
    "ModelArgs",
    "the stack's shape, layers, rotary tables, head and embeddings",
    (
        Field("num_layers", I64),
        Field("hidden", I64, "C"),
        Field("heads", I64, "H"),
        Field("kv_heads", I64, "Hkv"),
        Field("head_dim", I64, "D"),
        Field("inter", I64, "I"),
        Field("rotary_dim", I64, "R"),
        Field("eps", F64, "of every RMSNorm in the layers"),
        Field("layers", "const LayerArgs*", "[num_layers]"),
        Field("inv_freq", FLOATS, "[R/2] per rotary table (model/rope.py: scaling already applied)", count=2),
        Field("kv_type", I64, "KvType of the caches' elements (kv.h)"),
        Field("final_norm", FLOATS, "[C] the norm before the head (its scale); null: no head here", nullable=True),
        Field("final_eps", F64),
        Field("head", "QW", "[V, C]"),
        Field("embed", "QW", "[V, C] the token embeddings (fmt -1: the caller embeds)"),
        Field("embed_scale", F64, "each embedding times it (rounded to float32); 0 = none", nullable=True),
    ),
)

STEP = Struct(
    "StepArgs",
    "one step's tokens, slots and buffers",
    (
        Field("n", I64, "new tokens, one per sequence"),
        Field("positions", INDICES, "[N]: token i sees its sequence's keys at positions 0..positions[i]"),
        Field("write_slots", INDICES, "[N] (null with blocks)", nullable=True),
        Field("key_slots", INDICES, "[rows, smax]: slots of positions 0.. of a sequence (padded)", nullable=True),
        Field("key_rows", INDICES, "[N]: token i reads row key_rows[i] up to positions[i]; null: row i", nullable=True),
        Field("smax", I64),
        Field("scratch", "float*", "floats: see tl_decode_scratch_floats()"),
        Field("threads", I64),
        Field("timings", "int64_t*", "nanoseconds added per phase: matmuls, attention, everything else", nullable=True),
        # paged keys: with blocks set, key_slots and write_slots are derived from them (and may be null); row r of
        # key_slots is then the slots of positions 0..smax - 1 through blocks [rows, blocks_per_row]
        Field("blocks", INDICES, "[rows, blocks_per_row] block tables", nullable=True),
        Field("rows", I64),
        Field("blocks_per_row", I64),
        Field("block_size", I64),
        Field("ids", INDICES, "[N] tokens the step embeds into x first; null: x holds them", nullable=True),
        # the last layer stores every token's key and value, then runs the rest for out_rows alone; the other
        # rows of x are left unspecified
        Field("out_rows", INDICES, "[num_out] increasing rows below N the caller reads; null: all", nullable=True),
        Field("num_out", I64),
    ),
)

STRUCTS = (QW, PROJ, LAYER, MODEL, STEP)  # in declaration order: each uses only those before it


def _member(f: Field) -> str:
    array = f"[{f.count}]" if f.count else ""
    notes = [f.comment] if f.comment else []
    if f.nullable and f.is_pointer and "null" not in f.comment:
        notes.append("or null")
    comment = f"  // {', '.join(notes)}" if notes else ""
    return f"    {f.ctype} {f.name}{array};{comment}"


def header() -> str:
    """The structs as C++ in namespace tl, and TL_STEP_STRUCTS(X) / TL_STEP_FIELDS(X): X(struct) for each
    struct and X(struct, field) for each field, in table order (csrc/layout.cpp reports them)."""
    lines = [
        "// Written at build time from tinyllm/model/native/step_fields.py: edit the table there, not this file.",
        "#pragma once",
        "#include <cstdint>",
        "",
        "namespace tl {",
    ]
    for s in STRUCTS:
        lines += ["", f"struct {s.name} {{  // {s.comment}", *map(_member, s.fields), "};"]
    lines += ["", "}  // namespace tl", ""]
    lines.append("#define TL_STEP_STRUCTS(X) " + " ".join(f"X({s.name})" for s in STRUCTS))
    fields = [f"X({s.name}, {f.name})" for s in STRUCTS for f in s.fields]
    lines.append("#define TL_STEP_FIELDS(X) \\\n    " + " \\\n    ".join(fields))
    return "\n".join(lines) + "\n"


HEADER_NAME = "step_args.h"
