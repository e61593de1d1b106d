// A plain greedy draw over rows of logits in two passes per row: the first maximum (its index is the token),
// then S = sum e^(z - max) and T = sum e^(z - max) (max - z) in double. The token's log-probability is
// -log S and the entropy log S + T / S: two non-negative terms, so nothing cancels. -inf logits count as
// probability 0; a NaN, or a row without a finite value, is refused.
#include "pool.h"
#include "vmath.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tl {

// The maximum of z[0..n) (-inf for -inf only), or NaN when z holds a NaN.
static float span_max(const float* z, int64_t n) {
    float m = -INFINITY;
    int64_t i = 0;
#ifdef TL_SIMD
    bool nan = false;  // the vector part: its maximum and whether it holds a NaN
#ifdef TL_AVX2
    __m256 mv = _mm256_set1_ps(-INFINITY), unordered = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(z + i);
        unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        mv = _mm256_max_ps(mv, x);
    }
    nan = _mm256_movemask_ps(unordered) != 0;
    float lanes[8];
    _mm256_storeu_ps(lanes, mv);
    for (float l : lanes) m = l > m ? l : m;
#else
    float32x4_t mv = vdupq_n_f32(-INFINITY);
    uint32x4_t ordered = vdupq_n_u32(0xFFFFFFFFu);
    for (; i + 4 <= n; i += 4) {
        const float32x4_t x = vld1q_f32(z + i);
        ordered = vandq_u32(ordered, vceqq_f32(x, x));  // false for a NaN
        mv = vmaxq_f32(mv, x);
    }
    nan = vminvq_u32(ordered) == 0;
    if (!nan) m = vmaxvq_f32(mv);
#endif
    if (nan) return NAN;
#endif
    for (; i < n; ++i) {
        if (z[i] != z[i]) return NAN;
        m = z[i] > m ? z[i] : m;
    }
    return m;
}

// The first index of m in z[0..n), or -1.
static int64_t first_index(const float* z, int64_t n, float m) {
    int64_t j = 0;  // eight at a time, then the one
#if defined(TL_AVX2)
    const __m256 target = _mm256_set1_ps(m);
    for (; j + 8 <= n; j += 8)
        if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(z + j), target, _CMP_EQ_OQ))) break;
#elif defined(TL_NEON)
    const float32x4_t target = vdupq_n_f32(m);
    for (; j + 8 <= n; j += 8)
        if (vmaxvq_u32(vorrq_u32(vceqq_f32(vld1q_f32(z + j), target), vceqq_f32(vld1q_f32(z + j + 4), target)))) break;
#endif
    for (; j < n; ++j)
        if (z[j] == m) return j;
    return -1;
}

// S and T of the header for one row whose maximum is m.
static void sums(const float* z, int64_t v, float m, double* s_out, double* t_out) {
    double s = 0.0, t = 0.0;
    int64_t i = 0;
#ifdef TL_AVX2
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd(), t0 = _mm256_setzero_pd(), t1 = _mm256_setzero_pd();
    const __m256 mv = _mm256_set1_ps(m), ninf = _mm256_set1_ps(-INFINITY);
    for (; i + 8 <= v; i += 8) {
        const __m256 x = _mm256_loadu_ps(z + i);
        const __m256 d = _mm256_sub_ps(mv, x);  // >= 0; +inf for a -inf logit
        const __m256 e = _mm256_andnot_ps(_mm256_cmp_ps(x, ninf, _CMP_EQ_OQ), exp8(_mm256_sub_ps(x, mv)));
        const __m256 ed = _mm256_mul_ps(e, _mm256_andnot_ps(_mm256_cmp_ps(x, ninf, _CMP_EQ_OQ), d));
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
        t0 = _mm256_add_pd(t0, _mm256_cvtps_pd(_mm256_castps256_ps128(ed)));
        t1 = _mm256_add_pd(t1, _mm256_cvtps_pd(_mm256_extractf128_ps(ed, 1)));
    }
    double lanes[4];
    _mm256_storeu_pd(lanes, _mm256_add_pd(s0, s1));
    s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    _mm256_storeu_pd(lanes, _mm256_add_pd(t0, t1));
    t = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
#elif defined(TL_NEON)  // AVX2's operations: e and e * d per lane, widened, summed in its order
    float64x2_t s0[2] = {vdupq_n_f64(0.0), vdupq_n_f64(0.0)}, s1[2] = {s0[0], s0[0]}, t0[2] = {s0[0], s0[0]},
                t1[2] = {s0[0], s0[0]};
    const V8 mv = v8_set1(m);
    for (; i + 8 <= v; i += 8) {
        const V8 x = v8_load(z + i);
        const V8 d = v8_sub(mv, x);
        const V8 e = exp8(v8_sub(x, mv));
        const uint32x4_t live_lo = vmvnq_u32(vceqq_f32(x.lo, vdupq_n_f32(-INFINITY)));
        const uint32x4_t live_hi = vmvnq_u32(vceqq_f32(x.hi, vdupq_n_f32(-INFINITY)));
        const float32x4_t el = vreinterpretq_f32_u32(vandq_u32(live_lo, vreinterpretq_u32_f32(e.lo)));
        const float32x4_t eh = vreinterpretq_f32_u32(vandq_u32(live_hi, vreinterpretq_u32_f32(e.hi)));
        const float32x4_t edl = vmulq_f32(el, vreinterpretq_f32_u32(vandq_u32(live_lo, vreinterpretq_u32_f32(d.lo))));
        const float32x4_t edh = vmulq_f32(eh, vreinterpretq_f32_u32(vandq_u32(live_hi, vreinterpretq_u32_f32(d.hi))));
        s0[0] = vaddq_f64(s0[0], vcvt_f64_f32(vget_low_f32(el)));
        s0[1] = vaddq_f64(s0[1], vcvt_high_f64_f32(el));
        s1[0] = vaddq_f64(s1[0], vcvt_f64_f32(vget_low_f32(eh)));
        s1[1] = vaddq_f64(s1[1], vcvt_high_f64_f32(eh));
        t0[0] = vaddq_f64(t0[0], vcvt_f64_f32(vget_low_f32(edl)));
        t0[1] = vaddq_f64(t0[1], vcvt_high_f64_f32(edl));
        t1[0] = vaddq_f64(t1[0], vcvt_f64_f32(vget_low_f32(edh)));
        t1[1] = vaddq_f64(t1[1], vcvt_high_f64_f32(edh));
    }
    const float64x2_t sa = vaddq_f64(s0[0], s1[0]), sb = vaddq_f64(s0[1], s1[1]);
    const float64x2_t ta = vaddq_f64(t0[0], t1[0]), tb = vaddq_f64(t0[1], t1[1]);
    s = (vgetq_lane_f64(sa, 0) + vgetq_lane_f64(sa, 1)) + (vgetq_lane_f64(sb, 0) + vgetq_lane_f64(sb, 1));
    t = (vgetq_lane_f64(ta, 0) + vgetq_lane_f64(ta, 1)) + (vgetq_lane_f64(tb, 0) + vgetq_lane_f64(tb, 1));
#endif
    for (; i < v; ++i) {
        if (z[i] == -INFINITY) continue;
        const double e = std::exp((double)z[i] - (double)m);
        s += e;
        t += e * ((double)m - (double)z[i]);
    }
    *s_out = s;
    *t_out = t;
}

// Elements of a row one chunk covers. Fixed, so a row's sums are added in one order whatever the thread count
// or the other rows: a lone row's two passes still spread over the threads.
constexpr int64_t SPAN = 8192;

struct GreedyJob {
    const float* logits;
    int64_t v, spans;
    float* max;           // [b * spans]: each span's maximum (NaN: it holds a NaN)
    const float* row;     // [b]: each row's maximum, NaN for a refused row
    double *s, *t;        // [b * spans]: each span's S and T
};

static void max_chunk(void* ctx, int64_t c) {
    const GreedyJob& j = *static_cast<const GreedyJob*>(ctx);
    const int64_t r = c / j.spans, at = (c % j.spans) * SPAN;
    j.max[c] = span_max(j.logits + r * j.v + at, std::min(SPAN, j.v - at));
}

static void sums_chunk(void* ctx, int64_t c) {
    const GreedyJob& j = *static_cast<const GreedyJob*>(ctx);
    const int64_t r = c / j.spans, at = (c % j.spans) * SPAN;
    if (j.row[r] != j.row[r]) return;
    sums(j.logits + r * j.v + at, std::min(SPAN, j.v - at), j.row[r], j.s + c, j.t + c);
}

}  // namespace tl

extern "C" {

// For each of b rows of v logits: token[r], its log-probability and the entropy (nats) of softmax(row); each
// row's spans spread over the kernels' threads. Returns 0, or -1 - r for the first row r holding a NaN or no
// finite value.
int64_t tl_greedy_rows(const float* logits, int64_t b, int64_t v, int64_t* token, double* logprob, double* entropy,
                       int threads) {
    const int64_t spans = std::max<int64_t>(1, (v + tl::SPAN - 1) / tl::SPAN);
    thread_local std::vector<float> max, row;
    thread_local std::vector<double> s, t;
    max.assign(b * spans, 0.0f);
    row.assign(b, NAN);
    s.assign(b * spans, 0.0);
    t.assign(b * spans, 0.0);
    tl::GreedyJob job{logits, v, spans, max.data(), row.data(), s.data(), t.data()};
    tl::pool().run(tl::max_chunk, &job, b * spans, threads);
    int64_t refused = -1;
    for (int64_t r = 0; r < b; ++r) {  // the row's maximum, then its first index: in the first span holding it
        float m = -INFINITY;
        bool nan = false;
        for (int64_t k = 0; k < spans; ++k) {
            const float x = max[r * spans + k];
            nan = nan || x != x;
            m = x > m ? x : m;
        }
        token[r] = -1;
        if (nan || m == -INFINITY) {
            if (refused < 0) refused = r;
            continue;
        }
        row[r] = m;
        for (int64_t k = 0; k < spans && token[r] < 0; ++k)
            if (max[r * spans + k] == m)
                token[r] = k * tl::SPAN + tl::first_index(logits + r * v + k * tl::SPAN, std::min(tl::SPAN, v - k * tl::SPAN), m);
    }
    tl::pool().run(tl::sums_chunk, &job, b * spans, threads);
    for (int64_t r = 0; r < b; ++r) {
        if (token[r] < 0) continue;
        double S = 0.0, T = 0.0;
        for (int64_t k = 0; k < spans; ++k) S += s[r * spans + k], T += t[r * spans + k];
        logprob[r] = -std::log(S);
        entropy[r] = std::log(S) + T / S;
    }
    return refused < 0 ? 0 : -1 - refused;
}
}
