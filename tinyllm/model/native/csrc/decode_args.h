// The native decode step's arguments as Python lays them out (tinyllm/model/native/step_structs.py mirrors
// these structs with ctypes): a quantized weight, a projection, one layer's, the model's and one step's
// arguments, and the per-phase clock.
#pragma once
#include <chrono>
#include <cstdint>

namespace tl {


constexpr int64_t INT8_ACTIVATIONS = 256;  // or'ed into QW::fmt: 8-bit activations, data packed (q8act.h)
constexpr int64_t INT24_ACTIVATIONS = 512;  // and this too: 24-bit activations (three 8-bit limbs, q8act.h)

struct QW {  // a weight kept as GGUF blocks: [n, k]
    int64_t fmt;
    const uint8_t* data;
    int64_t stride, n, k;
};

struct Proj {  // a projection whose output rows are the parts' rows in order
    QW part[3];
    int64_t count;
};

struct LayerArgs {
    const float* attn_norm;      // [C] before attention
    const float* attn_out_norm;  // [C] on attention's output (sandwich layers) or null
    const float* mlp_norm;       // [C] before the MLP
    const float* mlp_out_norm;   // [C] on the MLP's output (sandwich layers) or null
    const float* q_norm;         // [D] per query head before rotation, or null
    const float* k_norm;         // [D] per key head, or null
    Proj qkv, gate_up;
    QW o, down;
    const float* qkv_bias;  // [(H + 2 Hkv) D] or null
    void* k_cache;          // [slots, Hkv * D] of this layer, elements of ModelArgs::kv_type
    void* v_cache;
    void* k_scale;          // q8_0 caches: [slots, Hkv * D / 32] float16 scales (kv.h); else null
    void* v_scale;
    int64_t window;      // keys visible to a query, its own included; 0 = all
    int64_t rope;        // which rotary table: 0 or 1
    int64_t activation;  // 0: SiLU, 1: GELU with the tanh approximation
    double scale;        // of the attention logits q . k
    double softcap;      // of the attention logits: cap * tanh(logit / cap); 0 = none
};

struct ModelArgs {
    int64_t num_layers, hidden, heads, kv_heads, head_dim, inter, rotary_dim;
    double eps;
    const LayerArgs* layers;
    const float* inv_freq[2];  // [R/2] per rotary table (model/rope.py: scaling already applied)
    int64_t kv_type;           // KvType of the caches' elements (kv.h)
    const float* final_norm;   // [C] the norm before the head (its effective weight), or null: no head here
    double final_eps;
    QW head;  // [V, C]
    QW embed;            // [V, C] the token embeddings (fmt -1: the caller embeds)
    double embed_scale;  // 0: none, else each embedding times it (rounded to float32)
};

struct StepArgs {
    int64_t n;                   // new tokens, one per sequence
    const int64_t* positions;    // [N]: token i sees its sequence's keys at positions 0..positions[i]
    const int64_t* write_slots;  // [N]
    const int64_t* key_slots;    // [rows, smax]: slots of positions 0.. of a sequence (padded)
    const int64_t* key_rows;     // [N]: token i reads row key_rows[i] up to positions[i]; null: row i
    int64_t smax;
    float* scratch;  // floats: see tl_decode_scratch_floats()
    int64_t threads;
    int64_t* timings;  // null, or nanoseconds added per phase: matmuls, attention, everything else
    // Paged keys: with blocks set, key_slots and write_slots are derived from them (and may be null). Row r of
    // key_slots is then the slots of positions 0..smax - 1 through blocks [rows, blocks_per_row].
    const int64_t* blocks;
    int64_t rows, blocks_per_row, block_size;
    const int64_t* ids;  // [N] tokens whose embeddings the step writes into x first, or null: x holds them
    // The tokens whose output the caller reads (num_out increasing indices below N), or null: all of them. The
    // last layer stores every token's key and value, then runs the rest for these alone; the other rows of x
    // are left unspecified.
    const int64_t* out_rows;
    int64_t num_out;
};

// Adds the time since the last mark to one phase of st.timings (a no-op when timings are off).
struct Clock {
    int64_t* timings;
    std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
    enum Phase { MATMUL = 0, ATTENTION = 1, OTHER = 2 };
    void mark(Phase p) {
        if (!timings) return;
        const auto now = std::chrono::steady_clock::now();
        timings[p] += std::chrono::duration_cast<std::chrono::nanoseconds>(now - last).count();
        last = now;
    }
};

}  // namespace tl
