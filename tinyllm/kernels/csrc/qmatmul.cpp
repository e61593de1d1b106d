// y[M, N] = x[M, K] @ W[N, K]^T with W kept as GGUF blocks, dequantized on the fly with float32 activations.
// M = 1: one fused decode + FMA pass per weight row. M > 1: each row pair is decoded once into an L1 buffer and
// reused for tiles of four activation rows. Threads split the output rows N into contiguous chunks.
#include "blocks.h"

#include <algorithm>
#include <vector>

namespace tl {

struct Weight {
    const uint8_t* data;
    int64_t n, k, stride;  // rows, columns, bytes between rows
};

#ifdef TL_AVX2
static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

template <int F> static void decode_rows(const Weight& w, int64_t n0, int64_t n1, float* out, int64_t ld) {
    using T = Traits<F>;
    const int64_t num_blocks = w.k / T::block;
    for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* row = w.data + n * w.stride;
        float* o = out + (n - n0) * ld;
        for (int64_t b = 0; b < num_blocks; ++b)
            for (int s = 0; s < T::block / 32; ++s, o += 32) {
#ifdef TL_AVX2
                __m256 v[4];
                decode32<F>(row + b * T::bytes, s, v);
                for (int g = 0; g < 4; ++g) _mm256_storeu_ps(o + 8 * g, v[g]);
#else
                decode32_scalar<F>(row + b * T::bytes, s, o);
#endif
            }
    }
}

template <int F> static float dot_row(const uint8_t* row, int64_t num_blocks, const float* x) {
    using T = Traits<F>;
#ifdef TL_AVX2
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < num_blocks; ++b) {
        const uint8_t* blk = row + b * T::bytes;
        for (int s = 0; s < T::block / 32; ++s, x += 32) {
            __m256 v[4];
            decode32<F>(blk, s, v);
            for (int g = 0; g < 4; ++g) acc[g] = _mm256_fmadd_ps(v[g], _mm256_loadu_ps(x + 8 * g), acc[g]);
        }
    }
    return hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
#else
    float acc[8] = {0};
    float v[32];
    for (int64_t b = 0; b < num_blocks; ++b)
        for (int s = 0; s < T::block / 32; ++s, x += 32) {
            decode32_scalar<F>(row + b * T::bytes, s, v);
            for (int l = 0; l < 32; ++l) acc[l & 7] += v[l] * x[l];
        }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
#endif
}

// R decoded weight rows (buf, leading dim k) times MT activation rows -> y[MT, R] (leading dim ldy).
template <int R, int MT> static void tile(const float* buf, const float* x, int64_t k, float* y, int64_t ldy) {
#ifdef TL_AVX2
    __m256 acc[R][MT];
    for (int r = 0; r < R; ++r)
        for (int m = 0; m < MT; ++m) acc[r][m] = _mm256_setzero_ps();
    for (int64_t i = 0; i < k; i += 8) {
        __m256 wv[R];
        for (int r = 0; r < R; ++r) wv[r] = _mm256_loadu_ps(buf + r * k + i);
        for (int m = 0; m < MT; ++m) {
            const __m256 xv = _mm256_loadu_ps(x + m * k + i);
            for (int r = 0; r < R; ++r) acc[r][m] = _mm256_fmadd_ps(wv[r], xv, acc[r][m]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int m = 0; m < MT; ++m) y[m * ldy + r] = hsum(acc[r][m]);
#else
    for (int r = 0; r < R; ++r)
        for (int m = 0; m < MT; ++m) {
            float acc[8] = {0};
            for (int64_t i = 0; i < k; ++i) acc[i & 7] += buf[r * k + i] * x[m * k + i];
            y[m * ldy + r] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        }
#endif
}

template <int R> static void tile_m(const float* buf, const float* x, int64_t m, int64_t k, float* y, int64_t ldy) {
    int64_t m0 = 0;
    for (; m0 + 4 <= m; m0 += 4) tile<R, 4>(buf, x + m0 * k, k, y + m0 * ldy, ldy);
    switch (m - m0) {
        case 3: tile<R, 3>(buf, x + m0 * k, k, y + m0 * ldy, ldy); break;
        case 2: tile<R, 2>(buf, x + m0 * k, k, y + m0 * ldy, ldy); break;
        case 1: tile<R, 1>(buf, x + m0 * k, k, y + m0 * ldy, ldy); break;
    }
}

template <int F> static void rows_chunk(const Weight& w, const float* x, int64_t m, float* y, int64_t n0, int64_t n1) {
    if (m == 1) {
        for (int64_t n = n0; n < n1; ++n) y[n] = dot_row<F>(w.data + n * w.stride, w.k / Traits<F>::block, x);
        return;
    }
    thread_local std::vector<float> buf;
    buf.resize(2 * w.k);
    for (int64_t n = n0; n < n1; n += 2) {
        const int64_t rows = std::min<int64_t>(2, n1 - n);
        decode_rows<F>(w, n, n + rows, buf.data(), w.k);
        if (rows == 2) tile_m<2>(buf.data(), x, m, w.k, y + n, w.n);
        else tile_m<1>(buf.data(), x, m, w.k, y + n, w.n);
    }
}

// Contiguous chunks of rows, a multiple of 8 rows each so threads never share a cache line of y.
static void split(int64_t n, int threads, int t, int64_t* n0, int64_t* n1) {
    int64_t chunk = ((n + threads - 1) / threads + 7) / 8 * 8;
    *n0 = std::min<int64_t>(n, chunk * t);
    *n1 = std::min<int64_t>(n, *n0 + chunk);
}

template <int F> static void matmul(const Weight& w, const float* x, int64_t m, float* y, int threads) {
#pragma omp parallel for schedule(static, 1) num_threads(threads)
    for (int t = 0; t < threads; ++t) {
        int64_t n0, n1;
        split(w.n, threads, t, &n0, &n1);
        if (n0 < n1) rows_chunk<F>(w, x, m, y, n0, n1);
    }
}

template <int F> static void dequantize(const Weight& w, float* out, int threads) {
#pragma omp parallel for schedule(static, 1) num_threads(threads)
    for (int t = 0; t < threads; ++t) {
        int64_t n0, n1;
        split(w.n, threads, t, &n0, &n1);
        if (n0 < n1) decode_rows<F>(w, n0, n1, out + n0 * w.k, w.k);
    }
}

#define TL_DISPATCH(fmt, call)            \
    switch (fmt) {                        \
        case tl::Q4_0: call(Q4_0); return 0;  \
        case tl::Q4_1: call(Q4_1); return 0;  \
        case tl::Q5_0: call(Q5_0); return 0;  \
        case tl::Q5_1: call(Q5_1); return 0;  \
        case tl::Q8_0: call(Q8_0); return 0;  \
        case tl::Q4_K: call(Q4_K); return 0;  \
        case tl::Q5_K: call(Q5_K); return 0;  \
        case tl::Q6_K: call(Q6_K); return 0;  \
        default: return -1;               \
    }

}  // namespace tl

extern "C" {

// y[m, n] = x[m, k] @ W^T. Returns 0, or -1 for an unknown format id.
int tl_qmatmul(int fmt, const float* x, int64_t m, int64_t k, const uint8_t* data, int64_t n, int64_t stride,
               float* y, int threads) {
    const tl::Weight w{data, n, k, stride};
#define TL_CALL(F) tl::matmul<tl::F>(w, x, m, y, threads)
    TL_DISPATCH(fmt, TL_CALL)
#undef TL_CALL
}

// out[n, k] = the weight dequantized to float32.
int tl_dequantize(int fmt, const uint8_t* data, int64_t n, int64_t k, int64_t stride, float* out, int threads) {
    const tl::Weight w{data, n, k, stride};
#define TL_CALL(F) tl::dequantize<tl::F>(w, out, threads)
    TL_DISPATCH(fmt, TL_CALL)
#undef TL_CALL
}

// 1 when built with the AVX2/FMA kernels, 0 for the portable scalar path.
int tl_simd() {
#ifdef TL_AVX2
    return 1;
#else
    return 0;
#endif
}
}
