// The decode step's attention over the paged (or contiguous) KV cache: scores, soft-cap, softmax and weighted
// values per span of keys at fixed positions, spans joined per head, so a sequence's attention is the same
// arithmetic whatever else shares the step or however many threads run it.
#pragma once
#include <type_traits>

#include "kv16.h"
#include "layer_ops.h"

namespace tl {

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
    int64_t run;      // spans per chunk of the span jobs, in order
    const int64_t* tokens;  // the job's tokens (offsets from i0)
};

// Query heads sharing a kv head that one pass over the span's keys and values serves: each key or value vector
// loaded feeds that many heads' FMAs. Four heads' accumulators in 16-lane vectors (4 x 4) or three in 8-lane
// ones (3 x 8) need AVX-512's 32 registers; with AVX2's 16 a pass serves one head. A head's arithmetic is the
// same in every case.
#if defined(TL_V16)
constexpr int PASS_HEADS = 4;
#elif defined(TL_AVX2) && defined(__AVX512VL__)
constexpr int PASS_HEADS = 3;
#else
constexpr int PASS_HEADS = 1;
#endif

// f(std::integral_constant<int, nh>{}) for 1 <= nh <= PASS_HEADS: a pass's head count as a template argument.
template <class F> static inline void with_heads(int64_t nh, F&& f) {
    if (PASS_HEADS >= 4 && nh == 4) f(std::integral_constant<int, PASS_HEADS >= 4 ? 4 : 1>{});
    else if (PASS_HEADS >= 3 && nh == 3) f(std::integral_constant<int, PASS_HEADS >= 3 ? 3 : 1>{});
    else if (PASS_HEADS >= 2 && nh == 2) f(std::integral_constant<int, PASS_HEADS >= 2 ? 2 : 1>{});
    else f(std::integral_constant<int, 1>{});
}

// For NH heads n (p + n * SPAN their probabilities, out[n] their outputs): out[n][d] = sum_s p_n[s] v_s[d] over
// the visible keys, 64 columns at a time held in registers over the keys.
template <int NH, class T>
static void weighted_values(const float* p, int64_t first, int64_t len, const int64_t* slots, KvPtr<T> v_cache,
                            int64_t kv_row, int64_t offset, int64_t D, float* const* out) {
    int64_t d0 = 0;
#if defined(TL_V16)
    for (; d0 + 64 <= D; d0 += 64) {  // the 8-lane loop's lanes, two of its vectors to one of these
        V16 acc[NH][4];
        for (int n = 0; n < NH; ++n)
            for (int b = 0; b < 4; ++b) acc[n][b] = _mm512_setzero_ps();
        for (int64_t s = first; s < len; ++s) {
            V16 w[NH];
            for (int n = 0; n < NH; ++n) w[n] = _mm512_set1_ps(p[n * SPAN + s - first]);
            const Row64<KvPtr<T>> v{v_cache + slots[s] * kv_row + offset + d0};
            for (int b = 0; b < 4; ++b) {
                const V16 vb = in_register(load16(v, 16 * b));
                for (int n = 0; n < NH; ++n) acc[n][b] = _mm512_fmadd_ps(w[n], vb, acc[n][b]);
            }
        }
        for (int n = 0; n < NH; ++n)
            for (int b = 0; b < 4; ++b) _mm512_storeu_ps(out[n] + d0 + 16 * b, acc[n][b]);
    }
#elif defined(TL_SIMD)
    for (; d0 + 64 <= D; d0 += 64) {
        V8 acc[NH][8];
        for (int n = 0; n < NH; ++n)
            for (int b = 0; b < 8; ++b) acc[n][b] = v8_zero();
        for (int64_t s = first; s < len; ++s) {
            V8 w[NH];
            for (int n = 0; n < NH; ++n) w[n] = v8_set1(p[n * SPAN + s - first]);
            const Row64<KvPtr<T>> v{v_cache + slots[s] * kv_row + offset + d0};
            for (int b = 0; b < 8; ++b) {
                const V8 vb = in_register(v.load(8 * b));
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

#if defined(TL_V16)
// out[n][j] = q_n . k_j for NH query heads (q_n = q + n * D) and 8 keys (d a multiple of 8): the 8-lane dot8's
// lanes, keys j and j + 4 side by side in one vector (each head's q twice), then the same transposing
// reduction.
template <int NH, class P> static inline void dot8(const float* q, int64_t D, const P* k, int64_t d, V8* out) {
    V16 acc[NH][4];
    for (int n = 0; n < NH; ++n)
        for (int j = 0; j < 4; ++j) acc[n][j] = _mm512_setzero_ps();
    for (int64_t i = 0; i < d; i += 8) {
        V16 qv[NH];
        for (int n = 0; n < NH; ++n) qv[n] = _mm512_broadcast_f32x8(v8_load(q + n * D + i));
        for (int j = 0; j < 4; ++j) {
            const V16 kj = in_register(load8x2(k[j] + i, k[j + 4] + i));
            for (int n = 0; n < NH; ++n) acc[n][j] = _mm512_fmadd_ps(qv[n], kj, acc[n][j]);
        }
    }
    for (int n = 0; n < NH; ++n) {
        const V16* a = acc[n];  // a[j] = [keys j | j + 4]: the halves' reduction is dot8's below
        out[n] = fold16(hadd16(hadd16(a[0], a[1]), hadd16(a[2], a[3])));
    }
}
#elif defined(TL_SIMD)
// out[n][j] = q_n . k_j for NH query heads (q_n = q + n * D) and 8 keys (d a multiple of 8): eight accumulators
// per head, each key vector loaded once for all heads, then one transposing reduction per head.
template <int NH, class P> static inline void dot8(const float* q, int64_t D, const P* k, int64_t d, V8* out) {
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
static void key_scores(const float* q, KvPtr<T> k_cache, const int64_t* slots, int64_t first, int64_t len,
                       int64_t kv_row, int64_t offset, int64_t D, float* p) {
    int64_t s = first;
#ifdef TL_SIMD
    if (D % 8 == 0)
        for (; s + 8 <= len; s += 8) {
            KvPtr<T> k[8];
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
    const float scale = (float)j.layer->scale, cap = (float)j.layer->softcap;
    alignas(32) float p[NH * SPAN];
    key_scores<NH, T>(q, kv_rows<T>(j.layer->k_cache, j.layer->k_scale), slots, first, last, kv_row, offset, D, p);
    for (int n = 0; n < NH; ++n) span_softmax(p + n * SPAN, last - first, scale, cap, o[n], D);
    weighted_values<NH, T>(p, first, last, slots, kv_rows<T>(j.layer->v_cache, j.layer->v_scale), kv_row, offset, D, o);
}

// Scores of query heads h..h + nh (nh <= PASS_HEADS, one kv head) against 8 keys k, into p (SPAN floats a head).
template <class P> static inline void dot8_heads(int64_t nh, const float* q, int64_t D, const P* k, float* p) {
#ifdef TL_SIMD
    V8 out[PASS_HEADS];
    with_heads(nh, [&](auto c) { dot8<decltype(c)::value>(q, D, k, D, out); });
    for (int64_t n = 0; n < nh; ++n) v8_store(p + n * SPAN, out[n]);
#endif
}

template <class T>
static inline void values_heads(int64_t nh, const float* p, int64_t first, int64_t last, const int64_t* slots,
                                KvPtr<T> v_cache, int64_t kv_row, int64_t offset, int64_t D, float* const* o) {
    with_heads(nh, [&](auto c) { weighted_values<decltype(c)::value, T>(p, first, last, slots, v_cache, kv_row, offset, D, o); });
}

// A decode token reads keys and values that no other token of the step brings into cache: its own row of key
// slots. A prompt chunk's tokens share a row.
static bool reads_alone(const StepArgs& st, int64_t i) {
    if (!st.key_rows) return true;
    const int64_t row = st.key_rows[i];
    return (i == 0 || st.key_rows[i - 1] != row) && (i + 1 == st.n || st.key_rows[i + 1] != row);
}

// Key rows asked for (into L2) ahead of the score pass that reads them: the first ASK_FIRST of a span at its
// start, then ASK_AHEAD keys ahead of the pass. Asking for a whole span at once stalls the pass on a full miss
// queue; asking only a few keys ahead leaves the rows late.
constexpr int64_t ASK_FIRST = 32, ASK_AHEAD = 24;

// attend_span for a token that streams its keys from memory: the scores of every head of the chunk, 8 keys at a
// time over whole key rows, asking for those keys' value rows as it goes (into L2), so the value pass finds
// them there, and during the value pass, which reads no new memory, for the key rows of the chunk's next span
// [next_first, next_last) (`asked`: this span's were asked so). The same arithmetic per head as the chunk's
// other path. Eight rows read a head's part at a time is a pattern the hardware prefetcher does not follow,
// hence the asking.
template <class T>
static void attend_streaming(const AttnJob& j, const float* q, const int64_t* slots, int64_t first, int64_t last,
                             int64_t kv0, float* part, int64_t r, bool asked, int64_t next_first, int64_t next_last) {
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
    const KvPtr<T> kc = kv_rows<T>(j.layer->k_cache, j.layer->k_scale);
    const KvPtr<T> vc = kv_rows<T>(j.layer->v_cache, j.layer->v_scale);
    int64_t s = first;
#ifdef TL_SIMD
    const int64_t lo = kv0 * D * kv_bytes<T>(), hi = (kv0 + j.kv_each) * D * kv_bytes<T>();
    auto ask = [&](KvPtr<T> cache, int64_t key) {  // the chunk's part of a key's (or value's) row, into L2
        const char* row = kv_addr(cache + slots[key] * kv_row);
        for (int64_t b = lo; b < hi; b += 64) __builtin_prefetch(row + b, 0, 2);
    };
    if (!asked)
        for (int64_t t = first; t < std::min(last, first + ASK_FIRST); ++t) ask(kc, t);
    if (D % 8 == 0)
        for (; s + 8 <= last; s += 8) {
            KvPtr<T> k[8];
            for (int64_t t = std::max(first + ASK_FIRST, s + ASK_AHEAD); t < std::min(last, s + ASK_AHEAD + 8); ++t)
                ask(kc, t);  // again where asked before: some were dropped
            for (int jj = 0; jj < 8; ++jj) {
                k[jj] = kc + slots[s + jj] * kv_row;
                ask(vc, s + jj);
            }
            for (int64_t g = kv0; g < kv0 + j.kv_each; ++g) {
                KvPtr<T> kg[8];
                for (int jj = 0; jj < 8; ++jj) kg[jj] = k[jj] + g * D;
                for (int64_t h = g * G; h < (g + 1) * G; h += PASS_HEADS)
                    dot8_heads(std::min<int64_t>(PASS_HEADS, (g + 1) * G - h), q + h * D, D, kg, p + (h - h0) * SPAN + s - first);
            }
        }
#endif
    for (; s < last; ++s)
        for (int64_t h = h0; h < h1; ++h) p[(h - h0) * SPAN + s - first] = dot(q + h * D, kc + slots[s] * kv_row + h / G * D, D);
    const float scale = (float)j.layer->scale, cap = (float)j.layer->softcap;
    for (int64_t h = h0; h < h1; ++h) span_softmax(p + (h - h0) * SPAN, last - first, scale, cap, o[h - h0], D);
    for (int64_t g = kv0; g < kv0 + j.kv_each; ++g) {
#ifdef TL_SIMD
        const int64_t nn = next_last - next_first, gi = g - kv0;  // the next span's key rows, a share per kv head
        for (int64_t t = next_first + nn * gi / j.kv_each; t < next_first + nn * (gi + 1) / j.kv_each; ++t) ask(kc, t);
#endif
        for (int64_t h = g * G; h < (g + 1) * G; h += PASS_HEADS)
            values_heads<T>(std::min<int64_t>(PASS_HEADS, (g + 1) * G - h), p + (h - h0) * SPAN, first, last, slots, vc, kv_row, g * D, D, o.data() + (h - h0));
    }
}

// One token (i = j.i0 + t), span r and `kv_each` kv heads from kv0, for each query head sharing such a kv head:
// its partial result over the span's visible keys at part + (h * R + r) * (D + 2) (attend_heads), PASS_HEADS
// heads at a time, or all of them at once for a token that streams its keys (attend_streaming). Each query
// head's arithmetic is the same however chunks are cut, however many heads share a pass and whichever of the
// two paths runs.
// The keys of span r that token i sees: [first, last), empty where none.
static inline std::pair<int64_t, int64_t> span_keys(const AttnJob& j, int64_t i, int64_t r) {
    const int64_t len = j.st->positions[i] + 1;
    const int64_t visible = j.layer->window > 0 ? std::max<int64_t>(0, len - j.layer->window) : 0;
    return {std::max(visible, r * SPAN), std::min(len, (r + 1) * SPAN)};
}

template <class T>
static void attend_one(const AttnJob& j, int64_t t, int64_t kv0, int64_t r, float* part, bool asked = false, int64_t r_next = -1) {
    const ModelArgs& md = *j.md;
    const StepArgs& st = *j.st;
    const int64_t H = md.heads, D = md.head_dim, KV = md.kv_heads, G = H / KV, R = j.spans;
    const int64_t i = j.i0 + t;
    const auto [first, last] = span_keys(j, i, r);
    const float* q = j.qkv + i * (H + 2 * KV) * D;
    const int64_t* slots = st.key_slots + (st.key_rows ? st.key_rows[i] : i) * st.smax;
    if (reads_alone(st, i)) {
        const auto [nf, nl] = r_next >= 0 ? span_keys(j, i, r_next) : std::pair<int64_t, int64_t>{0, 0};
        return attend_streaming<T>(j, q, slots, first, last, kv0, part, r, asked, nf, std::max(nf, nl));
    }
    for (int64_t g = kv0; g < kv0 + j.kv_each; ++g)
        for (int64_t h = g * G; h < (g + 1) * G; h += PASS_HEADS) {
            const int64_t nh = std::min<int64_t>(PASS_HEADS, (g + 1) * G - h);
            float* o[PASS_HEADS];
            for (int64_t n = 0; n < nh; ++n) o[n] = part + ((h + n) * R + r) * (D + 2);
            if (first >= last) {
                for (int64_t n = 0; n < nh; ++n) o[n][D + 1] = 0.0f;  // empty: l = 0
                continue;
            }
            with_heads(nh, [&](auto c) { attend_heads<decltype(c)::value, T>(j, q + h * D, slots, first, last, g * D, o); });
        }
}

// Chunk c of the span jobs: token t = c / (chunks per token), its kv heads' part and span; the partial results go
// to j.partial, joined afterwards by join_spans.
template <class T> static void attend_span(void* ctx, int64_t c) {
    const AttnJob& j = *static_cast<const AttnJob*>(ctx);
    const int64_t H = j.md->heads, D = j.md->head_dim, R = j.spans, per_token = j.md->kv_heads / j.kv_each;
    const int64_t runs = (R + j.run - 1) / j.run, t = j.tokens[c / (per_token * runs)];
    const int64_t kv0 = (c / runs) % per_token * j.kv_each, r0 = c % runs * j.run, r1 = std::min(R, r0 + j.run);
    for (int64_t r = r0; r < r1; ++r)
        attend_one<T>(j, t, kv0, r, j.partial + t * H * R * (D + 2), r > r0, r + 1 < r1 ? r + 1 : -1);
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
    const auto attend = md.kv_type == KV_F16 ? attend_span<half_t> : md.kv_type == KV_BF16 ? attend_span<bf16_t> : md.kv_type == KV_Q8 ? attend_span<q8_t> : attend_span<float>;
    const auto attend_whole = md.kv_type == KV_F16 ? attend_token<half_t> : md.kv_type == KV_BF16 ? attend_token<bf16_t> : md.kv_type == KV_Q8 ? attend_token<q8_t> : attend_token<float>;
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
            AttnJob job{&md, &L, &st, qkv, attn + i0 * H * D, i0, partial, spans, kv_each, 1, whole.data()};
            pool().run(attend_whole, &job, nw * (md.kv_heads / kv_each), threads);
        }
        // Decode tokens (and a few prompt tokens): a chunk per run of spans, so that long contexts spread over
        // the threads, then the spans joined. Whole key rows per chunk when that still leaves a few chunks per
        // thread, else a kv head's part of them.
        if (ns > 0) {
            const int64_t kv_each = ns * spans >= 4 * threads ? md.kv_heads : 1;
            // about four chunks a thread: a chunk asks for its next span's keys early
            const int64_t run = std::max<int64_t>(1, ns * spans / (4 * threads));
            AttnJob job{&md, &L, &st, qkv, attn + i0 * H * D, i0, partial, spans, kv_each, run, by_span.data()};
            pool().run(attend, &job, ns * (md.kv_heads / kv_each) * ((spans + run - 1) / run), threads);
            // joining is light: helpers only when there is enough of it to pay for waking them
            pool().run(join_spans, &job, ns * H, ns * H * spans * D >= (1 << 16) ? threads : 1);
        }
    }
}

}  // namespace tl
