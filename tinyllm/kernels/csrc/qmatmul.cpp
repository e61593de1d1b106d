// y[M, N] = x[M, K] @ W[N, K]^T with W kept as GGUF blocks, dequantized on the fly with float32 activations.
// M = 1: one fused decode + FMA pass per weight row. M > 1: each row pair is decoded once into an L1 buffer and
// reused for tiles of four activation rows. Threads split the output rows N into contiguous chunks.
#include "blocks.h"

#include <algorithm>
#include <vector>

namespace tl {

#ifndef FUSED_MAX_M
#define FUSED_MAX_M 64 // up to this M, blocks are decoded in registers per tile of 4 rows, not into a buffer
#endif

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

#ifdef TL_AVX2
// One weight row against MT activation rows (x leading dim k, y leading dim ldy): each block is decoded in
// registers once and used MT times; two accumulators per activation row split the FMA chains.
template <int F, int MT>
static void dot_row_m(const uint8_t* row, int64_t num_blocks, const float* x, int64_t k, float* y, int64_t ldy) {
    using T = Traits<F>;
    __m256 acc[MT][2];
    for (int m = 0; m < MT; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < num_blocks; ++b)
        for (int s = 0; s < T::block / 32; ++s, x += 32) {
            __m256 v[4];
            decode32<F>(row + b * T::bytes, s, v);
            for (int m = 0; m < MT; ++m)
                for (int g = 0; g < 4; ++g)
                    acc[m][g & 1] = _mm256_fmadd_ps(v[g], _mm256_loadu_ps(x + m * k + 8 * g), acc[m][g & 1]);
        }
    for (int m = 0; m < MT; ++m) y[m * ldy] = hsum(_mm256_add_ps(acc[m][0], acc[m][1]));
}

template <int F>
static void rows_fused(const Weight& w, const float* x, int64_t m, float* y, int64_t n0, int64_t n1) {
    const int64_t num_blocks = w.k / Traits<F>::block;
    for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* row = w.data + n * w.stride;
        int64_t m0 = 0;
        for (; m0 + 4 <= m; m0 += 4) dot_row_m<F, 4>(row, num_blocks, x + m0 * w.k, w.k, y + m0 * w.n + n, w.n);
        switch (m - m0) {
            case 3: dot_row_m<F, 3>(row, num_blocks, x + m0 * w.k, w.k, y + m0 * w.n + n, w.n); break;
            case 2: dot_row_m<F, 2>(row, num_blocks, x + m0 * w.k, w.k, y + m0 * w.n + n, w.n); break;
            case 1: dot_row_m<F, 1>(row, num_blocks, x + m0 * w.k, w.k, y + m0 * w.n + n, w.n); break;
        }
    }
}
#endif

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
        const int64_t num_blocks = w.k / Traits<F>::block;
        for (int64_t n = n0; n < n1; ++n) y[n] = dot_row<F>(w.data + n * w.stride, num_blocks, x);
        return;
    }
#ifdef TL_AVX2
    if (m <= FUSED_MAX_M) return rows_fused<F>(w, x, m, y, n0, n1);
#endif
    thread_local std::vector<float> buf;
    buf.resize(2 * w.k);
    for (int64_t n = n0; n < n1; n += 2) {
        const int64_t rows = std::min<int64_t>(2, n1 - n);
        decode_rows<F>(w, n, n + rows, buf.data(), w.k);
        if (rows == 2) tile_m<2>(buf.data(), x, m, w.k, y + n, w.n);
        else tile_m<1>(buf.data(), x, m, w.k, y + n, w.n);
    }
}

// Rows go to threads in chunks of a multiple of 16 rows (no two threads write one cache line of y), about four
// chunks per thread taken dynamically, so a thread the OS delays does not hold up the others.
static int64_t chunk_rows(int64_t n, int threads) {
    const int64_t per = (n + 4 * threads - 1) / (4 * threads);
    return std::max<int64_t>(16, (per + 15) / 16 * 16);
}

template <int F> static void matmul(const Weight& w, const float* x, int64_t m, float* y, int threads) {
    const int64_t chunk = chunk_rows(w.n, threads), num_chunks = (w.n + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (num_chunks > 1 && threads > 1)
    for (int64_t c = 0; c < num_chunks; ++c) rows_chunk<F>(w, x, m, y, c * chunk, std::min(w.n, (c + 1) * chunk));
}

template <int F> static void dequantize(const Weight& w, float* out, int threads) {
    const int64_t chunk = chunk_rows(w.n, threads), num_chunks = (w.n + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (num_chunks > 1 && threads > 1)
    for (int64_t c = 0; c < num_chunks; ++c)
        decode_rows<F>(w, c * chunk, std::min(w.n, (c + 1) * chunk), out + c * chunk * w.k, w.k);
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
