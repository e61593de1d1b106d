// A plain greedy draw over rows of logits in two passes per row: the first maximum (its index is the token),
// then S = sum e^(z - max) and T = sum e^(z - max) (max - z) in double. The token's log-probability is
// -log S and the entropy log S + T / S: two non-negative terms, so nothing cancels. -inf logits count as
// probability 0; a NaN, or a row without a finite value, is refused.
#include "pool.h"
#include "vmath.h"

#include <cmath>
#include <cstdint>

namespace tl {

// The first index of the row's maximum, or -1 for a NaN or a row of -inf only.
static int64_t first_max(const float* z, int64_t v) {
    float m = -INFINITY;
    int64_t at = -1;
    int64_t i = 0;
#ifdef TL_AVX2
    __m256 mv = _mm256_set1_ps(-INFINITY), nan = _mm256_setzero_ps();
    for (; i + 8 <= v; i += 8) {
        const __m256 x = _mm256_loadu_ps(z + i);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        mv = _mm256_max_ps(mv, x);
    }
    if (_mm256_movemask_ps(nan)) return -1;
    float lanes[8];
    _mm256_storeu_ps(lanes, mv);
    for (float l : lanes) m = l > m ? l : m;
    for (int64_t j = i; j < v; ++j) {
        if (z[j] != z[j]) return -1;
        m = z[j] > m ? z[j] : m;
    }
    if (m == -INFINITY) return -1;
    for (int64_t j = 0; j < v; ++j)
        if (z[j] == m) return j;
    return -1;
#else
    for (; i < v; ++i) {
        if (z[i] != z[i]) return -1;
        if (z[i] > m) m = z[i], at = i;
    }
    return at;
#endif
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

struct GreedyJob {
    const float* logits;
    int64_t v;
    int64_t* token;  // -1 marks a refused row
    double *logprob, *entropy;
};

static void greedy_row(void* ctx, int64_t r) {
    const GreedyJob& j = *static_cast<const GreedyJob*>(ctx);
    const float* z = j.logits + r * j.v;
    const int64_t at = first_max(z, j.v);
    j.token[r] = at;
    if (at < 0) return;
    double s, t;
    sums(z, j.v, z[at], &s, &t);
    j.logprob[r] = -std::log(s);
    j.entropy[r] = std::log(s) + t / s;
}

}  // namespace tl

extern "C" {

// For each of b rows of v logits: token[r], its log-probability and the entropy (nats) of softmax(row); rows
// spread over the kernels' threads. Returns 0, or -1 - r for the first row r holding a NaN or no finite value.
int64_t tl_greedy_rows(const float* logits, int64_t b, int64_t v, int64_t* token, double* logprob, double* entropy,
                       int threads) {
    tl::GreedyJob job{logits, v, token, logprob, entropy};
    tl::pool().run(tl::greedy_row, &job, b, threads);
    for (int64_t r = 0; r < b; ++r)
        if (token[r] < 0) return -1 - r;
    return 0;
}
}
