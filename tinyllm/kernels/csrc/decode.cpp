// One decode step of a stack of decoder layers in a single native call: for N new tokens (one per sequence)
// each layer runs RMSNorm -> q/k/v projection (+ bias) -> per-head q/k RMSNorm (optional) -> rotary -> store
// k, v at the token's slot -> attention over the sequence's stored keys (scale, soft-cap, sliding window) ->
// o projection (-> RMSNorm, sandwich layers) + residual -> RMSNorm -> gate/up projection -> SiLU or tanh-GELU
// of the gate times up -> down projection (-> RMSNorm) + residual. The projections are the quantized matmuls
// of qmatmul.cpp (a fused projection may be several weights of different formats); activations are float32,
// the KV cache float32, float16 or bfloat16 (kv.h).
// Python hands the layers' weights and KV pointers once (tinyllm/model/native/lowering.py; a (1 + w) norm
// arrives as its effective weight) and per step the positions, the slots (or the block tables they come from),
// the token ids (or their embeddings) and a scratch buffer; tl_decode_head then runs the final norm and the
// output projection over the rows to sample.
#include "blocks.h"
#include "kv.h"
#include "q8act.h"
#include "pool.h"
#include "vmath.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

extern "C" int tl_qmatmul(int fmt, const float* x, int64_t m, int64_t k, const uint8_t* data, int64_t n,
                          int64_t stride, float* y, int threads);
extern "C" int tl_dequantize(int fmt, const uint8_t* data, int64_t n, int64_t k, int64_t stride, float* out,
                             int threads);

namespace tl {

constexpr int64_t INT8_ACTIVATIONS = 256;  // or'ed into QW::fmt: 8-bit activations, data packed (q8act.h)

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
    int64_t window;  // keys visible to a query, its own included; 0 = all
    int64_t rope;    // which rotary table: 0 or 1
};

struct ModelArgs {
    int64_t num_layers, hidden, heads, kv_heads, head_dim, inter, rotary_dim;
    int64_t activation;          // 0: SiLU, 1: GELU with the tanh approximation
    double eps, scale, softcap;  // softcap 0 = none
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

template <class T> static inline float dot(const float* a, const T* b, int64_t d) {
    int64_t i = 0;
    float s = 0.0f;
#ifdef TL_SIMD
    V8 acc0 = v8_zero(), acc1 = v8_zero();
    for (; i + 16 <= d; i += 16) {
        acc0 = v8_fma(v8_load(a + i), load8(b + i), acc0);
        acc1 = v8_fma(v8_load(a + i + 8), load8(b + i + 8), acc1);
    }
    for (; i + 8 <= d; i += 8) acc0 = v8_fma(v8_load(a + i), load8(b + i), acc0);
    s = hsum(v8_add(acc0, acc1));
#endif
    for (; i < d; ++i) s += a[i] * to_float(b[i]);
    return s;
}

template <class T> static inline void axpy(float* y, float a, const T* x, int64_t d) {  // y += a * x
    int64_t i = 0;
#ifdef TL_SIMD
    const V8 av = v8_set1(a);
    for (; i + 8 <= d; i += 8) v8_store(y + i, v8_fma(av, load8(x + i), v8_load(y + i)));
#endif
    for (; i < d; ++i) y[i] += a * to_float(x[i]);
}

// p[j] = e^(p[j] - max) in place; returns their sum.
static float exp_shifted(float* p, int64_t s, float max) {
    int64_t j = 0;
    float sum = 0.0f;
#ifdef TL_SIMD
    const V8 m = v8_set1(max);
    V8 acc = v8_zero();
    for (; j + 8 <= s; j += 8) {
        const V8 e = exp8(v8_sub(v8_load(p + j), m));
        v8_store(p + j, e);
        acc = v8_add(acc, e);
    }
    sum = hsum(acc);
#endif
    for (; j < s; ++j) sum += (p[j] = std::exp(p[j] - max));
    return sum;
}

// out[c] = x[c] / sqrt(mean(x^2) + eps) * w[c] for each of n rows of c.
static void rms_norm(const float* x, const float* w, int64_t n, int64_t c, double eps, float* out) {
    for (int64_t r = 0; r < n; ++r) {
        const float* xr = x + r * c;
        const float inv = 1.0f / std::sqrt(dot(xr, xr, c) / (float)c + (float)eps);
        for (int64_t i = 0; i < c; ++i) out[r * c + i] = (xr[i] * inv) * w[i];
    }
}

// f(r0, r1) over rows 0..n in chunks on the pool's threads, or on the caller alone for a few rows (waking a
// helper costs more than they do). Row-wise work only: a row's result does not depend on the split.
constexpr int64_t ROWS_PER_TASK = 8;

template <class F> static void for_rows(int64_t n, int threads, F&& f) {
    if (threads <= 1 || n < 2 * ROWS_PER_TASK) return f(int64_t(0), n);
    struct Ctx {
        F* f;
        int64_t n, chunks;
    } ctx{&f, n, std::min<int64_t>(4 * threads, n / ROWS_PER_TASK)};
    auto chunk = [](void* c, int64_t i) {
        const Ctx& t = *static_cast<const Ctx*>(c);
        (*t.f)(t.n * i / t.chunks, t.n * (i + 1) / t.chunks);
    };
    pool().run(chunk, &ctx, ctx.chunks, threads);
}

// `a`: x quantized to 8 bits (a projection's parts share it), or null where no part takes 8-bit activations.
static void matmul(const QW& w, const float* x, const Q8Act* a, int64_t m, float* y, int threads) {
    if (w.fmt & INT8_ACTIVATIONS)
        q8_matmul((int)(w.fmt & 255), *a, w.data, w.n, y, threads);
    else
        tl_qmatmul((int)w.fmt, x, m, w.k, w.data, w.n, w.stride, y, threads);
}

static void matmul(const QW& w, const float* x, int64_t m, float* y, int threads) {
    if (!(w.fmt & INT8_ACTIVATIONS)) return matmul(w, x, nullptr, m, y, threads);
    const Q8Act a = q8_quantize(x, m, w.k, threads);
    matmul(w, x, &a, m, y, threads);
}

// y [m, sum of the parts' rows] = x @ [part 0; part 1; ...]^T; several parts go through `part` [m, rows].
static void matmul(const Proj& p, const float* x, int64_t m, float* y, float* part, int threads) {
    if (p.count == 1) return matmul(p.part[0], x, m, y, threads);
    int64_t width = 0, at = 0;
    bool int8 = false;
    for (int64_t i = 0; i < p.count; ++i) width += p.part[i].n, int8 |= (p.part[i].fmt & INT8_ACTIVATIONS) != 0;
    Q8Act a{};
    if (int8) a = q8_quantize(x, m, p.part[0].k, threads);
    for (int64_t i = 0; i < p.count; ++i) {
        const QW& w = p.part[i];
        matmul(w, x, &a, m, part, threads);
        for_rows(m, threads, [&](int64_t r0, int64_t r1) {  // on the pool: see PackJob in qmatmul.cpp
            for (int64_t r = r0; r < r1; ++r) std::copy(part + r * w.n, part + (r + 1) * w.n, y + r * width + at);
        });
        at += w.n;
    }
}

// Rotate the first R dims of each q and k head of tokens i0..i1 by their positions' angles (pair i, i + R/2:
// (a, b) -> (a cos - b sin, b cos + a sin)), then store k and v at each token's slot.
template <class T>
static void rope_store(const ModelArgs& md, const LayerArgs& L, const StepArgs& st, const float* trig, float* qkv,
                       int64_t i0, int64_t i1) {
    const int64_t D = md.head_dim, half = md.rotary_dim / 2, width = (md.heads + 2 * md.kv_heads) * D;
    const int64_t kv_row = md.kv_heads * D;
    for (int64_t i = i0; i < i1; ++i) {
        const float* cs = trig + (L.rope * st.n + i) * 2 * half;
        const float* sn = cs + half;
        float* row = qkv + i * width;
        for (int64_t h = 0; h < md.heads + md.kv_heads; ++h) {
            float* v = row + h * D;
            for (int64_t j = 0; j < half; ++j) {
                const float a = v[j], b = v[j + half];
                v[j] = a * cs[j] - b * sn[j];
                v[j + half] = b * cs[j] + a * sn[j];
            }
        }
        T* k = static_cast<T*>(L.k_cache) + st.write_slots[i] * kv_row;
        T* v = static_cast<T*>(L.v_cache) + st.write_slots[i] * kv_row;
        for (int64_t c = 0; c < kv_row; ++c) {
            store(row[md.heads * D + c], k + c);
            store(row[md.heads * D + kv_row + c], v + c);
        }
    }
}

// trig [tables, N, 2, R/2]: cos and sin of each token's angles (position * inv_freq[j], in float32 as
// model/rope.py) per rotary table, made once per step for all the layers.
static void rotary_angles(const ModelArgs& md, const StepArgs& st, float* trig) {
    const int64_t half = md.rotary_dim / 2;
    for (int64_t t = 0; t < 2 && md.inv_freq[t]; ++t)
        for (int64_t i = 0; i < st.n; ++i) {
            const float pos = (float)st.positions[i];
            float* cs = trig + (t * st.n + i) * 2 * half;
            for (int64_t j = 0; j < half; ++j) {
                const float angle = pos * md.inv_freq[t][j];
                cs[j] = std::cos(angle);
                cs[half + j] = std::sin(angle);
            }
        }
}

// Keys per attention chunk. Spans sit at fixed positions (span r holds keys r * SPAN .. (r + 1) * SPAN - 1), so a
// sequence's attention is the same arithmetic whatever else shares the step or however many threads run it.
constexpr int64_t SPAN = 64;

struct AttnJob {
    const ModelArgs* md;
    const LayerArgs* layer;
    const StepArgs* st;
    const float* qkv;
    float* out;       // [N, H * D]
    int64_t i0;       // the first token of this group (attention runs over groups of tokens)
    float* partial;   // [tokens * H, spans, D + 2]: a span's unnormalised output, its max score, its sum of e^(s - max)
    int64_t spans;    // ceil(smax / SPAN)
    int64_t kv_each;  // kv heads per chunk: all of them (whole key rows read in order) or one
    const int64_t* tokens;  // the job's tokens (offsets from i0)
};

// Query heads sharing a kv head that one pass over the span's keys and values serves: each key or value vector
// loaded feeds that many heads' FMAs. Three heads' accumulators (3 x 8 vectors) need AVX-512's 32 registers;
// with AVX2's 16 a pass serves one head. A head's arithmetic is the same in either case.
#if defined(TL_AVX2) && defined(__AVX512VL__)
constexpr int PASS_HEADS = 3;
#else
constexpr int PASS_HEADS = 1;
#endif

// For NH heads n (p + n * SPAN their probabilities, out[n] their outputs): out[n][d] = sum_s p_n[s] v_s[d] over
// the visible keys, 64 columns at a time held in registers over the keys.
template <int NH, class T>
static void weighted_values(const float* p, int64_t first, int64_t len, const int64_t* slots, const T* v_cache,
                            int64_t kv_row, int64_t offset, int64_t D, float* const* out) {
    int64_t d0 = 0;
#ifdef TL_SIMD
    for (; d0 + 64 <= D; d0 += 64) {
        V8 acc[NH][8];
        for (int n = 0; n < NH; ++n)
            for (int b = 0; b < 8; ++b) acc[n][b] = v8_zero();
        for (int64_t s = first; s < len; ++s) {
            V8 w[NH];
            for (int n = 0; n < NH; ++n) w[n] = v8_set1(p[n * SPAN + s - first]);
            const T* v = v_cache + slots[s] * kv_row + offset + d0;
            for (int b = 0; b < 8; ++b) {
                const V8 vb = in_register(load8(v + 8 * b));
                for (int n = 0; n < NH; ++n) acc[n][b] = v8_fma(w[n], vb, acc[n][b]);
            }
        }
        for (int n = 0; n < NH; ++n)
            for (int b = 0; b < 8; ++b) v8_store(out[n] + d0 + 8 * b, acc[n][b]);
    }
#endif
    if (d0 == D) return;
    for (int n = 0; n < NH; ++n) {
        std::fill(out[n] + d0, out[n] + D, 0.0f);
        for (int64_t s = first; s < len; ++s)
            axpy(out[n] + d0, p[n * SPAN + s - first], v_cache + slots[s] * kv_row + offset + d0, D - d0);
    }
}

#ifdef TL_SIMD
// out[n][j] = q_n . k_j for NH query heads (q_n = q + n * D) and 8 keys (d a multiple of 8): eight accumulators
// per head, each key vector loaded once for all heads, then one transposing reduction per head.
template <int NH, class T> static inline void dot8(const float* q, int64_t D, const T* const* k, int64_t d, V8* out) {
    V8 acc[NH][8];
    for (int n = 0; n < NH; ++n)
        for (int j = 0; j < 8; ++j) acc[n][j] = v8_zero();
    for (int64_t i = 0; i < d; i += 8) {
        V8 qv[NH];
        for (int n = 0; n < NH; ++n) qv[n] = v8_load(q + n * D + i);
        for (int j = 0; j < 8; ++j) {
            const V8 kj = in_register(load8(k[j] + i));
            for (int n = 0; n < NH; ++n) acc[n][j] = v8_fma(qv[n], kj, acc[n][j]);
        }
    }
    for (int n = 0; n < NH; ++n) {
        const V8* a = acc[n];
        const V8 t0 = v8_hadd(a[0], a[1]), t1 = v8_hadd(a[2], a[3]);
        const V8 t2 = v8_hadd(a[4], a[5]), t3 = v8_hadd(a[6], a[7]);
        out[n] = v8_fold(v8_hadd(t0, t1), v8_hadd(t2, t3));
    }
}
#endif

// p[n * SPAN + s - first] = q_n . k_s for NH query heads (q_n = q + n * D) over the visible keys.
template <int NH, class T>
static void key_scores(const float* q, const T* k_cache, const int64_t* slots, int64_t first, int64_t len,
                       int64_t kv_row, int64_t offset, int64_t D, float* p) {
    int64_t s = first;
#ifdef TL_SIMD
    if (D % 8 == 0)
        for (; s + 8 <= len; s += 8) {
            const T* k[8];
            for (int j = 0; j < 8; ++j) k[j] = k_cache + slots[s + j] * kv_row + offset;
            V8 out[NH];
            dot8<NH>(q, D, k, D, out);
            for (int n = 0; n < NH; ++n) v8_store(p + n * SPAN + s - first, out[n]);
        }
#endif
    for (; s < len; ++s)
        for (int n = 0; n < NH; ++n) p[n * SPAN + s - first] = dot(q + n * D, k_cache + slots[s] * kv_row + offset, D);
}

// A head's scores p[0..n) over a span in place: scaled (and soft-capped), then e^(v - max); o[D] = max and
// o[D + 1] = the sum of the e^.
static void span_softmax(float* pn, int64_t n, float scale, float cap, float* o, int64_t D) {
    float max = -INFINITY;
    int64_t s = 0;
#ifdef TL_SIMD
    if (cap <= 0.0f) {  // max(v, m) keeps m for a NaN v as std::max(m, v) does; a zero max's sign changes no e^
        V8 m8 = v8_set1(-INFINITY);
        for (; s + 8 <= n; s += 8) {
            const V8 v = v8_mul(v8_load(pn + s), v8_set1(scale));
            v8_store(pn + s, v);
            m8 = v8_max(v, m8);
        }
        alignas(32) float lanes[8];
        v8_store(lanes, m8);
        for (float l : lanes) max = std::max(max, l);
    }
#endif
    for (; s < n; ++s) {
        float v = pn[s] * scale;
        if (cap > 0.0f) v = std::tanh(v / cap) * cap;
        pn[s] = v;
        max = std::max(max, v);
    }
    o[D + 1] = exp_shifted(pn, n, max);
    o[D] = max;
}

// The span's part of attention for NH query heads h0.. sharing one kv head (its keys and values at `offset` in
// a row): scores scale * q . k_s (soft-capped), their max m, l = sum e^(score - m) and o = sum e^(score - m) v_s,
// written to the heads' partial results o_n (o_n[D] = m, o_n[D + 1] = l).
template <int NH, class T>
static void attend_heads(const AttnJob& j, const float* q, const int64_t* slots, int64_t first, int64_t last,
                         int64_t offset, float* const* o) {
    const ModelArgs& md = *j.md;
    const int64_t D = md.head_dim, kv_row = md.kv_heads * D;
    const float scale = (float)md.scale, cap = (float)md.softcap;
    alignas(32) float p[NH * SPAN];
    key_scores<NH>(q, static_cast<const T*>(j.layer->k_cache), slots, first, last, kv_row, offset, D, p);
    for (int n = 0; n < NH; ++n) span_softmax(p + n * SPAN, last - first, scale, cap, o[n], D);
    weighted_values<NH>(p, first, last, slots, static_cast<const T*>(j.layer->v_cache), kv_row, offset, D, o);
}

// Scores of query heads h..h + nh (nh <= PASS_HEADS, one kv head) against 8 keys k, into p (SPAN floats a head).
template <class T> static inline void dot8_heads(int64_t nh, const float* q, int64_t D, const T* const* k, float* p) {
#ifdef TL_SIMD
    V8 out[PASS_HEADS];
    if (PASS_HEADS >= 3 && nh == 3) dot8<PASS_HEADS >= 3 ? 3 : 1>(q, D, k, D, out);
    else if (PASS_HEADS >= 2 && nh == 2) dot8<PASS_HEADS >= 2 ? 2 : 1>(q, D, k, D, out);
    else dot8<1>(q, D, k, D, out);
    for (int64_t n = 0; n < nh; ++n) v8_store(p + n * SPAN, out[n]);
#endif
}

template <class T>
static inline void values_heads(int64_t nh, const float* p, int64_t first, int64_t last, const int64_t* slots,
                                const T* v_cache, int64_t kv_row, int64_t offset, int64_t D, float* const* o) {
    if (PASS_HEADS >= 3 && nh == 3) weighted_values<PASS_HEADS >= 3 ? 3 : 1>(p, first, last, slots, v_cache, kv_row, offset, D, o);
    else if (PASS_HEADS >= 2 && nh == 2) weighted_values<PASS_HEADS >= 2 ? 2 : 1>(p, first, last, slots, v_cache, kv_row, offset, D, o);
    else weighted_values<1>(p, first, last, slots, v_cache, kv_row, offset, D, o);
}

// A decode token reads keys and values that no other token of the step brings into cache: its own row of key
// slots. A prompt chunk's tokens share a row.
static bool reads_alone(const StepArgs& st, int64_t i) {
    if (!st.key_rows) return true;
    const int64_t row = st.key_rows[i];
    return (i == 0 || st.key_rows[i - 1] != row) && (i + 1 == st.n || st.key_rows[i + 1] != row);
}

// attend_span for a token that streams its keys from memory: the scores of every head of the chunk, 8 keys at a
// time over whole key rows, asking for those keys' value rows as it goes (into L2), so the value pass finds
// them there. The same arithmetic per head as the chunk's other path (measured: 29-34 -> 21-23 ns per head and
// key on one thread, 15 -> 12 on two, with keys and values in memory; keys in cache gain nothing).
// Eight rows read a head's part at a time is a pattern the hardware prefetcher does not follow (a test program:
// 6-9 GB/s on one thread against 19-26 for the same bytes in order), so the span's key rows are asked for at
// the start, and again eight keys ahead: 32 sequences at ~280 keys, attention 33-35 -> 25-30 ms a step.
template <class T>
static void attend_streaming(const AttnJob& j, const float* q, const int64_t* slots, int64_t first, int64_t last,
                             int64_t kv0, float* part, int64_t r) {
    const ModelArgs& md = *j.md;
    const int64_t H = md.heads, D = md.head_dim, KV = md.kv_heads, G = H / KV, R = j.spans, kv_row = KV * D;
    const int64_t h0 = kv0 * G, h1 = (kv0 + j.kv_each) * G;
    thread_local std::vector<float*> o;
    thread_local std::vector<float> scores;  // [heads, SPAN]
    o.resize(h1 - h0);
    for (int64_t h = h0; h < h1; ++h) o[h - h0] = part + (h * R + r) * (D + 2);
    if (first >= last) {
        for (float* oh : o) oh[D + 1] = 0.0f;  // empty: l = 0
        return;
    }
    scores.resize((h1 - h0) * SPAN);
    float* p = scores.data();
    const T* kc = static_cast<const T*>(j.layer->k_cache);
    const T* vc = static_cast<const T*>(j.layer->v_cache);
    int64_t s = first;
#ifdef TL_SIMD
    const int64_t lo = kv0 * D * (int64_t)sizeof(T), hi = (kv0 + j.kv_each) * D * (int64_t)sizeof(T);
    auto ask = [&](const T* cache, int64_t key) {  // the chunk's part of a key's (or value's) row, into L2
        const char* row = reinterpret_cast<const char*>(cache + slots[key] * kv_row);
        for (int64_t b = lo; b < hi; b += 64) __builtin_prefetch(row + b, 0, 2);
    };
    for (int64_t t = first; t < last; ++t) ask(kc, t);
    if (D % 8 == 0)
        for (; s + 8 <= last; s += 8) {
            const T* k[8];
            for (int64_t t = s + 8; t < std::min(last, s + 16); ++t) ask(kc, t);  // again: some were dropped
            for (int jj = 0; jj < 8; ++jj) {
                k[jj] = kc + slots[s + jj] * kv_row;
                ask(vc, s + jj);
            }
            for (int64_t g = kv0; g < kv0 + j.kv_each; ++g) {
                const T* kg[8];
                for (int jj = 0; jj < 8; ++jj) kg[jj] = k[jj] + g * D;
                for (int64_t h = g * G; h < (g + 1) * G; h += PASS_HEADS)
                    dot8_heads(std::min<int64_t>(PASS_HEADS, (g + 1) * G - h), q + h * D, D, kg, p + (h - h0) * SPAN + s - first);
            }
        }
#endif
    for (; s < last; ++s)
        for (int64_t h = h0; h < h1; ++h) p[(h - h0) * SPAN + s - first] = dot(q + h * D, kc + slots[s] * kv_row + h / G * D, D);
    for (int64_t h = h0; h < h1; ++h) span_softmax(p + (h - h0) * SPAN, last - first, (float)md.scale, (float)md.softcap, o[h - h0], D);
    for (int64_t g = kv0; g < kv0 + j.kv_each; ++g)
        for (int64_t h = g * G; h < (g + 1) * G; h += PASS_HEADS)
            values_heads(std::min<int64_t>(PASS_HEADS, (g + 1) * G - h), p + (h - h0) * SPAN, first, last, slots, vc, kv_row, g * D, D, o.data() + (h - h0));
}

// One token (i = j.i0 + t), span r and `kv_each` kv heads from kv0, for each query head sharing such a kv head:
// its partial result over the span's visible keys at part + (h * R + r) * (D + 2) (attend_heads), PASS_HEADS
// heads at a time, or all of them at once for a token that streams its keys (attend_streaming). Each query
// head's arithmetic is the same however chunks are cut, however many heads share a pass and whichever of the
// two paths runs.
template <class T> static void attend_one(const AttnJob& j, int64_t t, int64_t kv0, int64_t r, float* part) {
    const ModelArgs& md = *j.md;
    const StepArgs& st = *j.st;
    const int64_t H = md.heads, D = md.head_dim, KV = md.kv_heads, G = H / KV, R = j.spans;
    const int64_t i = j.i0 + t, len = st.positions[i] + 1;
    const int64_t visible = j.layer->window > 0 ? std::max<int64_t>(0, len - j.layer->window) : 0;
    const int64_t first = std::max(visible, r * SPAN), last = std::min(len, (r + 1) * SPAN);
    const float* q = j.qkv + i * (H + 2 * KV) * D;
    const int64_t* slots = st.key_slots + (st.key_rows ? st.key_rows[i] : i) * st.smax;
    if (reads_alone(st, i)) return attend_streaming<T>(j, q, slots, first, last, kv0, part, r);
    for (int64_t g = kv0; g < kv0 + j.kv_each; ++g)
        for (int64_t h = g * G; h < (g + 1) * G; h += PASS_HEADS) {
            const int64_t nh = std::min<int64_t>(PASS_HEADS, (g + 1) * G - h);
            float* o[PASS_HEADS];
            for (int64_t n = 0; n < nh; ++n) o[n] = part + ((h + n) * R + r) * (D + 2);
            if (first >= last) {
                for (int64_t n = 0; n < nh; ++n) o[n][D + 1] = 0.0f;  // empty: l = 0
                continue;
            }
            if (PASS_HEADS >= 3 && nh == 3) attend_heads<PASS_HEADS >= 3 ? 3 : 1, T>(j, q + h * D, slots, first, last, g * D, o);
            else if (PASS_HEADS >= 2 && nh == 2) attend_heads<PASS_HEADS >= 2 ? 2 : 1, T>(j, q + h * D, slots, first, last, g * D, o);
            else attend_heads<1, T>(j, q + h * D, slots, first, last, g * D, o);
        }
}

// Chunk c of the span jobs: token t = c / (chunks per token), its kv heads' part and span; the partial results go
// to j.partial, joined afterwards by join_spans.
template <class T> static void attend_span(void* ctx, int64_t c) {
    const AttnJob& j = *static_cast<const AttnJob*>(ctx);
    const int64_t H = j.md->heads, D = j.md->head_dim, R = j.spans, per_token = j.md->kv_heads / j.kv_each;
    const int64_t t = j.tokens[c / (per_token * R)];
    attend_one<T>(j, t, (c / R) % per_token * j.kv_each, c % R, j.partial + t * H * R * (D + 2));
}

// One token and query head: its spans' outputs joined, out = sum_r e^(m_r - M) o_r / sum_r e^(m_r - M) l_r with
// M the largest m_r. A single span gives o / l exactly.
static void join(const float* part, int64_t R, int64_t D, float* out) {
    float max = -INFINITY;
    for (int64_t r = 0; r < R; ++r)
        if (part[r * (D + 2) + D + 1] > 0.0f) max = std::max(max, part[r * (D + 2) + D]);
    float sum = 0.0f;
    bool started = false;
    for (int64_t r = 0; r < R; ++r) {
        const float* o = part + r * (D + 2);
        if (o[D + 1] == 0.0f) continue;
        const float w = std::exp(o[D] - max);
        sum += w * o[D + 1];
        if (!started) {
            for (int64_t d = 0; d < D; ++d) out[d] = w * o[d];
            started = true;
        } else {
            axpy(out, w, o, D);
        }
    }
    const float inv = 1.0f / sum;
    for (int64_t d = 0; d < D; ++d) out[d] *= inv;
}

// Chunk c: token j.tokens[c / H], head c % H.
static void join_spans(void* ctx, int64_t c) {
    const AttnJob& j = *static_cast<const AttnJob*>(ctx);
    const int64_t H = j.md->heads, D = j.md->head_dim, R = j.spans, t = j.tokens[c / H], h = c % H;
    join(j.partial + (t * H + h) * R * (D + 2), R, D, j.out + (t * H + h) * D);
}

// A token of a prompt chunk, whose keys other tokens of the step read too: chunk c is token j.tokens[c / per]
// and kv heads (c % per) * kv_each.. of it, every span in turn into a buffer of this thread, then joined right
// away. The same spans and the same join as the span jobs, so the same bits, without the round trip of the
// partial results through memory or a second pass over the pool.
template <class T> static void attend_token(void* ctx, int64_t c) {
    const AttnJob& j = *static_cast<const AttnJob*>(ctx);
    const int64_t H = j.md->heads, D = j.md->head_dim, R = j.spans, G = H / j.md->kv_heads;
    const int64_t per = j.md->kv_heads / j.kv_each, t = j.tokens[c / per], kv0 = c % per * j.kv_each;
    thread_local std::vector<float> buf;
    if ((int64_t)buf.size() < H * R * (D + 2)) buf.resize(H * R * (D + 2));
    for (int64_t r = 0; r < R; ++r) attend_one<T>(j, t, kv0, r, buf.data());
    for (int64_t h = kv0 * G; h < (kv0 + j.kv_each) * G; ++h) join(buf.data() + h * R * (D + 2), R, D, j.out + (t * H + h) * D);
}

// act[i] = silu(gate[i]) * up[i] = gate / (1 + e^-gate) * up, for each of n rows of [gate | up].
static void silu_mul(const float* gu, int64_t n, int64_t inter, float* act) {
    for (int64_t r = 0; r < n; ++r) {
        const float* g = gu + r * 2 * inter;
        const float* u = g + inter;
        float* a = act + r * inter;
        int64_t i = 0;
#ifdef TL_SIMD
        const V8 one = v8_set1(1.0f);
        for (; i + 8 <= inter; i += 8) {
            const V8 gv = v8_load(g + i);
            const V8 e = exp8(v8_sub(v8_zero(), gv));
            v8_store(a + i, v8_mul(v8_div(gv, v8_add(one, e)), v8_load(u + i)));
        }
#endif
        for (; i < inter; ++i) a[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    }
}

// act[i] = gelu(gate[i]) * up[i] with gelu(g) = g / 2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), tanh(y) written
// as (1 - e^-2|y|) / (1 + e^-2|y|) with y's sign.
static void gelu_mul(const float* gu, int64_t n, int64_t inter, float* act) {
    const float c = 0.7978845608028654f, k = 0.044715f;
    for (int64_t r = 0; r < n; ++r) {
        const float* g = gu + r * 2 * inter;
        const float* u = g + inter;
        float* a = act + r * inter;
        int64_t i = 0;
#ifdef TL_SIMD
        const V8 one = v8_set1(1.0f), half = v8_set1(0.5f);
        for (; i + 8 <= inter; i += 8) {
            const V8 gv = v8_load(g + i);
            const V8 y = v8_mul(v8_set1(c), v8_add(gv, v8_mul(v8_set1(k), v8_mul(gv, v8_mul(gv, gv)))));
            const V8 e = exp8(v8_mul(v8_set1(-2.0f), v8_abs(y)));
            const V8 t = v8_copysign(v8_div(v8_sub(one, e), v8_add(one, e)), y);
            const V8 gelu = v8_mul(v8_mul(half, gv), v8_add(one, t));
            v8_store(a + i, v8_mul(gelu, v8_load(u + i)));
        }
#endif
        for (; i < inter; ++i) a[i] = 0.5f * g[i] * (1.0f + std::tanh(c * (g[i] + k * g[i] * g[i] * g[i]))) * u[i];
    }
}

static void add_into(float* x, const float* y, int64_t count) {
    for (int64_t i = 0; i < count; ++i) x[i] += y[i];
}

// Per-head RMSNorm of the q heads (w_q) and k heads (w_k) of tokens i0..i1's q/k/v rows, in place.
static void qk_norm(const ModelArgs& md, const LayerArgs& L, int64_t i0, int64_t i1, float* qkv) {
    const int64_t D = md.head_dim, width = (md.heads + 2 * md.kv_heads) * D;
    for (int64_t i = i0; i < i1; ++i) {
        rms_norm(qkv + i * width, L.q_norm, md.heads, D, md.eps, qkv + i * width);
        rms_norm(qkv + i * width + md.heads * D, L.k_norm, md.kv_heads, D, md.eps, qkv + i * width + md.heads * D);
    }
}

// Tokens whose attention runs at once: all of them unless their spans' partial results pass 2^20 floats. A
// token's arithmetic is the same in any group.
static int64_t attention_group(const ModelArgs& md, int64_t n, int64_t smax) {
    const int64_t per_token = md.heads * ((smax + SPAN - 1) / SPAN) * (md.head_dim + 2);
    return std::max<int64_t>(1, std::min<int64_t>(n, (int64_t(1) << 20) / per_token));
}

// Attention of the step's N tokens (qkv [N, width] rotated, their keys and values stored) into attn [N, H * D].
static void attention(const ModelArgs& md, const LayerArgs& L, const StepArgs& st, const float* qkv, float* attn,
                      float* partial) {
    const int64_t N = st.n, H = md.heads, D = md.head_dim;
    const int threads = (int)st.threads;
    const int64_t spans = (st.smax + SPAN - 1) / SPAN, group = attention_group(md, N, st.smax);
    const auto attend = md.kv_type == KV_F16 ? attend_span<half_t> : md.kv_type == KV_BF16 ? attend_span<bf16_t> : attend_span<float>;
    const auto attend_whole = md.kv_type == KV_F16 ? attend_token<half_t> : md.kv_type == KV_BF16 ? attend_token<bf16_t> : attend_token<float>;
    thread_local std::vector<int64_t> whole, by_span;
    for (int64_t i0 = 0; i0 < N; i0 += group) {  // tokens in groups: the spans' partial results stay bounded
        const int64_t n = std::min(group, N - i0);
        whole.clear();
        by_span.clear();
        for (int64_t t = 0; t < n; ++t) (reads_alone(st, i0 + t) ? by_span : whole).push_back(t);
        if ((int64_t)whole.size() * md.kv_heads < 4 * threads) {  // too few chunks: spans spread the work
            by_span.insert(by_span.end(), whole.begin(), whole.end());
            whole.clear();
        }
        // Prompt tokens: a chunk per token (and kv head, for a few tokens), its spans joined in the chunk.
        const int64_t nw = (int64_t)whole.size(), ns = (int64_t)by_span.size();
        if (nw > 0) {
            const int64_t kv_each = nw >= 4 * threads ? md.kv_heads : 1;
            AttnJob job{&md, &L, &st, qkv, attn + i0 * H * D, i0, partial, spans, kv_each, whole.data()};
            pool().run(attend_whole, &job, nw * (md.kv_heads / kv_each), threads);
        }
        // Decode tokens (and a few prompt tokens): a chunk per span, so that long contexts spread over the
        // threads, then the spans joined. Whole key rows per chunk when that still leaves a few chunks per
        // thread, else a kv head's part of them.
        if (ns > 0) {
            const int64_t kv_each = ns * spans >= 4 * threads ? md.kv_heads : 1;
            AttnJob job{&md, &L, &st, qkv, attn + i0 * H * D, i0, partial, spans, kv_each, by_span.data()};
            pool().run(attend, &job, ns * (md.kv_heads / kv_each) * spans, threads);
            // joining is light: helpers only when there is enough of it to pay for waking them
            pool().run(join_spans, &job, ns * H, ns * H * spans * D >= (1 << 16) ? threads : 1);
        }
    }
}

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

// keep != null: the layer's keys and values for all st.n tokens, the rest for keep[0..m) alone (keep_rows).
static void layer_step(const ModelArgs& md, const LayerArgs& L, const StepArgs& all, const float* trig, float* x,
                       const int64_t* keep = nullptr, int64_t m = 0) {
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
    for_rows(N, threads, [&](int64_t r0, int64_t r1) { rms_norm(x + r0 * C, L.attn_norm, r1 - r0, C, md.eps, h + r0 * C); });
    clock.mark(Clock::OTHER);
    matmul(L.qkv, h, N, qkv, part, threads);
    clock.mark(Clock::MATMUL);
    auto rope = md.kv_type == KV_F16 ? rope_store<half_t> : md.kv_type == KV_BF16 ? rope_store<bf16_t> : rope_store<float>;
    for_rows(N, threads, [&](int64_t r0, int64_t r1) {
        if (L.qkv_bias)
            for (int64_t i = r0; i < r1; ++i) add_into(qkv + i * width, L.qkv_bias, width);
        if (L.q_norm) qk_norm(md, L, r0, r1, qkv);
        rope(md, L, all, trig, qkv, r0, r1);
    });
    thread_local std::vector<int64_t> kept_pos, kept_rows;
    const StepArgs st = keep ? keep_rows(all, keep, m, C, width, qkv, x, kept_pos, kept_rows) : all;
    const int64_t M = st.n;  // the rows the rest runs for
    clock.mark(Clock::OTHER);
    if (M == 0) return;
    attention(md, L, st, qkv, attn, partial);
    clock.mark(Clock::ATTENTION);
    matmul(L.o, attn, M, tmp, threads);
    clock.mark(Clock::MATMUL);
    for_rows(M, threads, [&](int64_t r0, int64_t r1) {  // the residual, then the MLP's norm, row by row
        float *xr = x + r0 * C, *tr = tmp + r0 * C;
        if (L.attn_out_norm) rms_norm(tr, L.attn_out_norm, r1 - r0, C, md.eps, tr);
        add_into(xr, tr, (r1 - r0) * C);
        rms_norm(xr, L.mlp_norm, r1 - r0, C, md.eps, h + r0 * C);
    });
    clock.mark(Clock::OTHER);
    matmul(L.gate_up, h, M, gu, part, threads);
    clock.mark(Clock::MATMUL);
    for_rows(M, threads, [&](int64_t r0, int64_t r1) {
        (md.activation == 1 ? gelu_mul : silu_mul)(gu + r0 * 2 * I, r1 - r0, I, act + r0 * I);
    });
    clock.mark(Clock::OTHER);
    matmul(L.down, act, M, tmp, threads);
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
        tl::layer_step(*md, md->layers[l], st, trig, x, last && some ? st.out_rows : nullptr, st.num_out);
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
