// One decode step of a stack of decoder layers in a single native call: for N new tokens (one per sequence)
// each layer runs RMSNorm -> q/k/v projection (+ bias) -> per-head q/k RMSNorm (optional) -> rotary -> store
// k, v at the token's slot -> attention over the sequence's stored keys (scale, soft-cap, sliding window) ->
// o projection (-> RMSNorm, sandwich layers) + residual -> RMSNorm -> gate/up projection -> SiLU or tanh-GELU
// of the gate times up -> down projection, or a mixture of experts' (moe.h) (-> RMSNorm) + residual; a layer
// without a norm (a null pointer in
// its LayerArgs) skips it. The projections are the quantized matmuls of qmatmul.cpp (a fused projection may
// be several weights of different formats); activations are float32, the KV cache float32, float16, bfloat16
// or q8_0 (kv.h).
// Python hands the layers' weights and KV pointers once (tinyllm/model/native/lowering.py; a (1 + w) norm
// arrives as its effective weight) and per step the positions, the slots (or the block tables they come from),
// the token ids (or their embeddings) and a scratch buffer; tl_decode_head then runs the final norm and the
// output projection over the rows to sample.
// The step's arguments, layer operations and attention are in decode_args.h (its structs generated from
// tinyllm/model/native/step_fields.py), layer_ops.h and attention.h; layout.cpp reports the structs' layout.
#include "attention.h"
#include "blocks.h"
#include "moe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tl {

// x [n, C] = the embeddings of ids (times embed_scale), decoded as the reference decodes them. Returns 0, or -1
// for an id outside them, or no embeddings.
static int embed(const ModelArgs& md, const int64_t* ids, int64_t n, float* x) {
    const QW& w = md.embed;
    if (w.fmt < 0 || w.k != md.hidden) return -1;
    for (int64_t i = 0; i < n; ++i)
        if (ids[i] < 0 || ids[i] >= w.n) return -1;
    for (int64_t i = 0; i < n; ++i) tl_dequantize((int)w.fmt, w.data + ids[i] * w.stride, 1, w.k, w.stride, x + i * w.k, 1);
    if (md.embed_scale != 0.0) {
        const float scale = (float)md.embed_scale;
        for (int64_t i = 0; i < n * w.k; ++i) x[i] *= scale;
    }
    return 0;
}

// st with key_slots and write_slots filled in from its block tables (into keys and writes), or st itself.
static StepArgs paged_slots(const StepArgs& st, std::vector<int64_t>& keys, std::vector<int64_t>& writes) {
    if (!st.blocks) return st;
    const int64_t P = st.block_size;
    keys.resize(st.rows * st.smax);
    for (int64_t r = 0; r < st.rows; ++r)
        for (int64_t s = 0; s < st.smax; ++s) keys[r * st.smax + s] = st.blocks[r * st.blocks_per_row + s / P] * P + s % P;
    writes.resize(st.n);
    for (int64_t i = 0; i < st.n; ++i) writes[i] = keys[(st.key_rows ? st.key_rows[i] : i) * st.smax + st.positions[i]];
    StepArgs out = st;
    out.key_slots = keys.data();
    out.write_slots = writes.data();
    return out;
}

// st for the tokens keep[0..m) alone (increasing), their qkv rows and x rows moved to rows 0..m in place (a row
// moves down or stays); their keys are read where st reads them. pos and rows hold the new arrays.
static StepArgs keep_rows(const StepArgs& st, const int64_t* keep, int64_t m, int64_t C, int64_t width, float* qkv,
                          float* x, std::vector<int64_t>& pos, std::vector<int64_t>& rows) {
    pos.resize(m);
    rows.resize(m);
    for (int64_t j = 0; j < m; ++j) {
        const int64_t i = keep[j];
        pos[j] = st.positions[i];
        rows[j] = st.key_rows ? st.key_rows[i] : i;
        if (i == j) continue;
        std::copy(qkv + i * width, qkv + (i + 1) * width, qkv + j * width);
        std::copy(x + i * C, x + (i + 1) * C, x + j * C);
    }
    StepArgs out = st;
    out.n = m;
    out.positions = pos.data();
    out.key_rows = rows.data();
    out.write_slots = nullptr;  // stored already
    return out;
}

// The lines of the keys and values that layer `next` will read for st's tokens (whole blocks of the paged cache,
// float types), to be asked for during layer L's o projection and MLP (ahead.h): at several tokens its float32
// matmuls keep the cores busy while the attention after them waits on memory. Null for one token (the matmuls
// wait on memory too), integer activations (their matmuls are short and read weights fast: the asks slowed
// them as much as they sped attention up), key slots given directly, or a q8_0 cache.
static Ahead* keys_ahead(const ModelArgs& md, const LayerArgs& L, const LayerArgs* next, const StepArgs& st,
                         int64_t m) {
    if (!next || m < 2 || !st.blocks || md.kv_type == KV_Q8 || (L.o.fmt & INT8_ACTIVATIONS)) return nullptr;
    thread_local Ahead ahead;
    thread_local std::vector<const char*> starts;
    thread_local std::vector<int64_t> len;  // keys per sequence row
    len.assign(st.rows, 0);
    for (int64_t i = 0; i < m; ++i) {
        const int64_t r = st.key_rows ? st.key_rows[i] : i;
        len[r] = std::max(len[r], st.positions[i] + 1);
    }
    const int64_t P = st.block_size, bytes = P * md.kv_heads * md.head_dim * (md.kv_type == KV_F32 ? 4 : 2);
    starts.clear();
    for (int64_t r = 0; r < st.rows; ++r) {
        const int64_t first = next->window > 0 ? std::max<int64_t>(0, len[r] - next->window) : 0;
        for (int64_t b = first / P; b * P < len[r]; ++b) {
            const int64_t block = st.blocks[r * st.blocks_per_row + b];
            starts.push_back(static_cast<const char*>(next->k_cache) + block * bytes);
            starts.push_back(static_cast<const char*>(next->v_cache) + block * bytes);
        }
    }
    const int64_t inter = L.num_experts ? L.top_k * L.experts_down[0].k : md.inter;  // a row's MLP width
    const double macs = (double)m * md.hidden * (md.heads * md.head_dim + 3 * inter);  // o, gate/up and down
    ahead.starts = starts.data();
    ahead.num = (int64_t)starts.size();
    ahead.lines = (bytes + 63) / 64;
    ahead.lines_per_mac = 1.1 * ahead.num * ahead.lines / macs;  // done a little before the matmuls are
    ahead.next.store(0, std::memory_order_relaxed);
    return &ahead;
}

// keep != null: the layer's keys and values for all st.n tokens, the rest for keep[0..m) alone (keep_rows).
// next: the layer after this one, whose keys and values are asked for during this one's matmuls (keys_ahead).
static void layer_step(const ModelArgs& md, const LayerArgs& L, const StepArgs& all, const float* trig, float* x,
                       const int64_t* keep = nullptr, int64_t m = 0, const LayerArgs* next = nullptr) {
    const int64_t N = all.n, C = md.hidden, H = md.heads, D = md.head_dim, I = md.inter;
    const int64_t width = (H + 2 * md.kv_heads) * D;
    const int threads = (int)all.threads;
    float* h = all.scratch;          // [N, C]
    float* qkv = h + N * C;          // [N, width]
    float* attn = qkv + N * width;   // [N, H * D]
    float* tmp = attn + N * H * D;   // [N, C]
    float* gu = tmp + N * C;         // [N, 2I]
    float* act = gu + N * 2 * I;     // [N, I]
    float* part = act + N * I;       // [N, max(width, 2I)]: one part of a projection stored in several
    float* partial = part + N * std::max(width, 2 * I);  // [group * H, spans, D + 2]

    Clock clock{all.timings};
    if (L.attn_norm)
        for_rows(N, threads, [&](int64_t r0, int64_t r1) { rms_norm(x + r0 * C, L.attn_norm, r1 - r0, C, md.eps, h + r0 * C); });
    clock.mark(Clock::OTHER);
    matmul(L.qkv, L.attn_norm ? h : x, N, qkv, part, threads);  // no norm: the projection reads x
    clock.mark(Clock::MATMUL);
    auto rope = md.kv_type == KV_F16    ? rope_store<half_t>
                : md.kv_type == KV_BF16 ? rope_store<bf16_t>
                : md.kv_type == KV_Q8   ? rope_store<q8_t>
                                        : rope_store<float>;
    for_rows(N, threads, [&](int64_t r0, int64_t r1) {
        if (L.qkv_bias)
            for (int64_t i = r0; i < r1; ++i) add_into(qkv + i * width, L.qkv_bias, width);
        if (L.q_norm || L.k_norm) qk_norm(md, L, r0, r1, qkv);
        rope(md, L, all, trig, qkv, r0, r1);
    });
    thread_local std::vector<int64_t> kept_pos, kept_rows;
    const StepArgs st = keep ? keep_rows(all, keep, m, C, width, qkv, x, kept_pos, kept_rows) : all;
    const int64_t M = st.n;  // the rows the rest runs for
    clock.mark(Clock::OTHER);
    if (M == 0) return;
    attention(md, L, st, qkv, attn, partial);
    clock.mark(Clock::ATTENTION);
    Ahead* ahead = keys_ahead(md, L, next, st, M);
    matmul(L.o, attn, M, tmp, threads, ahead);
    clock.mark(Clock::MATMUL);
    for_rows(M, threads, [&](int64_t r0, int64_t r1) {  // the residual, then the MLP's norm, row by row
        float *xr = x + r0 * C, *tr = tmp + r0 * C;
        if (L.attn_out_norm) rms_norm(tr, L.attn_out_norm, r1 - r0, C, md.eps, tr);
        add_into(xr, tr, (r1 - r0) * C);
        if (L.mlp_norm) rms_norm(xr, L.mlp_norm, r1 - r0, C, md.eps, h + r0 * C);
    });
    clock.mark(Clock::OTHER);
    if (L.num_experts) {
        moe(L, L.mlp_norm ? h : x, M, C, tmp, threads, ahead);
    } else {
        matmul(L.gate_up, L.mlp_norm ? h : x, M, gu, part, threads, ahead);
        clock.mark(Clock::MATMUL);
        for_rows(M, threads, [&](int64_t r0, int64_t r1) {
            (L.activation == 1 ? gelu_mul : silu_mul)(gu + r0 * 2 * I, r1 - r0, I, act + r0 * I);
        });
        clock.mark(Clock::OTHER);
        matmul(L.down, act, M, tmp, threads, ahead);
    }
    clock.mark(Clock::MATMUL);
    for_rows(M, threads, [&](int64_t r0, int64_t r1) {
        float *xr = x + r0 * C, *tr = tmp + r0 * C;
        if (L.mlp_out_norm) rms_norm(tr, L.mlp_out_norm, r1 - r0, C, md.eps, tr);
        add_into(xr, tr, (r1 - r0) * C);
    });
    for (int64_t j = M - 1; j >= 0 && keep; --j)  // the kept rows back where the caller reads them
        if (keep[j] != j) std::copy(x + j * C, x + (j + 1) * C, x + keep[j] * C);
    clock.mark(Clock::OTHER);
}

}  // namespace tl

extern "C" {

// Floats of scratch one step of n tokens over at most smax keys needs.
int64_t tl_decode_scratch_floats(const tl::ModelArgs* md, int64_t n, int64_t smax) {
    const int64_t width = (md->heads + 2 * md->kv_heads) * md->head_dim;
    const int64_t partial = tl::attention_group(*md, n, smax) * md->heads * ((smax + tl::SPAN - 1) / tl::SPAN) *
                            (md->head_dim + 2);
    return n * (2 * md->hidden + width + md->heads * md->head_dim + 3 * md->inter + std::max(width, 2 * md->inter) +
                2 * md->rotary_dim) +  // the last: rotary cos and sin per table
           partial;
}

// out[i] = x[i] rounded to the KV element type as the step stores keys and values (for tests against torch's
// rounding). Returns 0, or -1 for an unknown type.
int tl_kv_round(int64_t kv_type, const float* x, int64_t n, void* out) {
    switch (kv_type) {
        case tl::KV_F16:
            for (int64_t i = 0; i < n; ++i) tl::store(x[i], static_cast<tl::half_t*>(out) + i);
            return 0;
        case tl::KV_BF16:
            for (int64_t i = 0; i < n; ++i) tl::store(x[i], static_cast<tl::bf16_t*>(out) + i);
            return 0;
        default: return -1;
    }
}

// x [n] (n a multiple of 32) quantized to q8_0 as the step stores keys and values: q [n] int8, d [n / 32]
// float16 (for tests against cache/q8_kv.py). Returns 0, or -1 when n is not a multiple of 32.
int tl_kv_q8(const float* x, int64_t n, void* q, void* d) {
    if (n % tl::Q8_BLOCK) return -1;
    tl::store_row<tl::q8_t>(x, n, q, d, 0);
    return 0;
}

// x [n, hidden]: the tokens' embeddings in (or written first, from st.ids), the last layer's output (before the
// final norm) out, in the rows of st.out_rows when set. Returns 0, -1 when the rotary dims are more than the
// head's, -2 for an id outside the embeddings (or no embeddings to look it up in), or -3 when out_rows are not
// increasing rows below n.
int tl_decode_layers(const tl::ModelArgs* md, const tl::StepArgs* args, float* x) {
    if (md->rotary_dim > md->head_dim) return -1;
    for (int64_t j = 0; args->out_rows && j < args->num_out; ++j)
        if (args->out_rows[j] < (j ? args->out_rows[j - 1] + 1 : 0) || args->out_rows[j] >= args->n) return -3;
    if (args->ids && tl::embed(*md, args->ids, args->n, x) != 0) return -2;
    thread_local std::vector<int64_t> keys, writes;
    const tl::StepArgs st = tl::paged_slots(*args, keys, writes);
    float* trig = st.scratch + tl_decode_scratch_floats(md, st.n, st.smax) - 2 * st.n * md->rotary_dim;
    tl::rotary_angles(*md, st, trig);
    const bool some = st.out_rows && st.num_out < st.n;
    for (int64_t l = 0; l < md->num_layers; ++l) {
        const bool last = l + 1 == md->num_layers;
        tl::layer_step(*md, md->layers[l], st, trig, x, last && some ? st.out_rows : nullptr, st.num_out,
                       last ? nullptr : &md->layers[l + 1]);
    }
    return 0;
}

// logits [m, V] = head(final_norm(x[rows[i]])) for i < m (x [n, hidden]). Returns 0, -1 without a head, or -2
// for a row outside x.
int tl_decode_head(const tl::ModelArgs* md, const float* x, int64_t n, const int64_t* rows, int64_t m,
                   float* logits, int64_t threads) {
    if (!md->final_norm || !md->head.data) return -1;
    for (int64_t i = 0; i < m; ++i)
        if (rows[i] < 0 || rows[i] >= n) return -2;
    const int64_t C = md->hidden;
    thread_local std::vector<float> h;
    h.resize(m * C);
    for (int64_t i = 0; i < m; ++i) tl::rms_norm(x + rows[i] * C, md->final_norm, 1, C, md->final_eps, h.data() + i * C);
    tl::matmul(md->head, h.data(), m, logits, (int)threads);
    return 0;
}
}
