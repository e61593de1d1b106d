// y[M, N] = x[M, K] @ W[N, K]^T with the activations quantized to 8 bits (opt-in: weights="native-int8").
// Each 32-element block of an activation row becomes d = max|x| / 127 and q = x * (1 / d) rounded to nearest
// even (so |q| <= 127), the arithmetic llama.cpp's q8 activations use. A weight block then meets it in
// integers: the 32 products q_w * q_x are summed exactly in eight int32 lanes (lane j: elements 4j..4j+3;
// one VNNI instruction where the CPU has it, else two), and the lanes are scaled by d_w * d_x into eight
// float accumulators, even and odd blocks in two chains; the formats with a minimum add m_w * (d_x * sum q_x)
// per block to a scalar of the same chain. Q4_0/Q5_0 keep their codes unsigned and take 8 or 16 * sum q_x
// off lane 0, exactly. Every output is the same operations in the same order whatever M is and however many
// threads run, so a token's row does not depend on the rows beside it.
// Formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, and Q4_K, Q5_K, Q6_K by their 32-element sub-blocks (a sub-block's
// scale times d_x; Q6_K has two scales per 32, one per half of the lanes).
#include "blocks.h"
#include "pool.h"
#include "vmath.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tl {

Pool& pool();

struct Q8Act {  // an activation matrix quantized per 32 elements
    const int8_t* q;      // [M, K]
    const float* d;       // [M, K / 32]
    const int32_t* sum;   // [M, K / 32]: sum of the block's q
    const float* s;       // [M, K / 32]: d * sum, as float32
    const float* dt;      // [K / 32, M]: d transposed (four rows' scales of a block in one load)
    const float* st;      // [K / 32, M]: s transposed
    int64_t kb, m;        // blocks per row, rows
};

// Quantizes one row of k floats (k a multiple of 32). A block holding a NaN or an infinity gets d = NaN and
// q = 0, so its outputs are NaN; a block whose d would be subnormal (every |x| < 127 * 2^-126) counts as zeros.
static void quantize_row(const float* x, int64_t k, int8_t* q, float* d, int32_t* sum, float* s) {
    for (int64_t b = 0; b < k / 32; ++b, x += 32, q += 32) {
        float amax = 0.0f;
        bool bad = false;
        for (int l = 0; l < 32; ++l) {
            const float a = std::fabs(x[l]);
            bad |= !(a <= 3.4028234663852886e38f);  // NaN or infinite
            amax = a > amax ? a : amax;
        }
        float db = bad ? NAN : amax / 127.0f;
        if (db < 1.17549435e-38f) db = 0.0f;  // a subnormal d (1 / d might overflow): the block counts as zeros
        const float id = db != 0.0f && !bad ? 1.0f / db : 0.0f;
        int32_t total = 0;
        if (bad) {
            std::fill(q, q + 32, (int8_t)0);
        } else {
#ifdef TL_AVX2
            const __m256 vid = _mm256_set1_ps(id);
            __m256i v[4];
            for (int g = 0; g < 4; ++g) v[g] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * g), vid));  // RNE
            const __m256i w16 = _mm256_packs_epi32(v[0], v[1]), z16 = _mm256_packs_epi32(v[2], v[3]);
            const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w16, z16), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i*)q, bytes);
            for (int l = 0; l < 32; ++l) total += q[l];
#else
            for (int l = 0; l < 32; ++l) {
                q[l] = (int8_t)(int)std::nearbyint(x[l] * id);
                total += q[l];
            }
#endif
        }
        d[b] = db;
        sum[b] = total;
        s[b] = db * (float)total;
    }
}

template <int F> static constexpr bool has_min() { return F == Q4_1 || F == Q5_1 || F == Q4_K || F == Q5_K; }
template <int F> static constexpr bool signed_codes() { return F == Q8_0 || F == Q6_K; }
template <int F> static constexpr int offset() { return F == Q4_0 ? 8 : F == Q5_0 ? 16 : 0; }
template <int F> static constexpr int subs() { return Traits<F>::block / 32; }  // 32-element sub-blocks per block
template <int F> static constexpr int codes_at() {  // byte offset of the quants in a 32-element block
    return F == Q4_0 || F == Q8_0 ? 2 : F == Q4_1 ? 4 : F == Q5_0 ? 6 : 8;
}

// Sub-block `sub` of a block: its scale (two for Q6_K: elements 0..15 and 16..31) and the minimum's
// multiplier m (the block adds m * sum of x; -dmin * mn for the K formats). Products of an fp16 and a
// 6- or 8-bit scale are exact in float32, as in the reference.
template <int F> static inline void sub_scales(const uint8_t* b, int sub, float* d0, float* d1, float* m) {
    *m = 0.0f;
    if constexpr (F == Q4_K || F == Q5_K) {
        int sc, mn;
        k_scale_min(b + 4, sub, &sc, &mn);
        *d0 = *d1 = f16(b) * (float)sc;
        *m = -(f16(b + 2) * (float)mn);
    } else if constexpr (F == Q6_K) {
        const int h = sub / 4, j = sub % 4;
        const float d = f16(b + 208);
        *d0 = d * (float)(int8_t)b[192 + h * 8 + j * 2];
        *d1 = d * (float)(int8_t)b[192 + h * 8 + j * 2 + 1];
    } else {
        *d0 = *d1 = f16(b);
        if constexpr (has_min<F>()) *m = f16(b + 2);
    }
}

#ifdef TL_AVX2
// The sub-block's 32 codes as bytes in element order: unsigned (0..31) for Q4/Q5 and the K formats with a
// minimum, signed for Q8_0 and Q6_K.
template <int F> static inline __m256i codes(const uint8_t* blk, int sub) {
    const __m256i low4 = _mm256_set1_epi8(15);
    if constexpr (F == Q8_0) {
        return _mm256_loadu_si256((const __m256i*)(blk + 2));
    } else if constexpr (F == Q4_K || F == Q5_K) {
        const __m256i qs = _mm256_loadu_si256((const __m256i*)(blk + (F == Q4_K ? 16 : 48) + (sub / 2) * 32));
        __m256i c = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(4 * (sub & 1))), low4);
        if constexpr (F == Q5_K) {  // bit `sub` of qh[l] is element l's fifth bit
            const __m256i qh = _mm256_loadu_si256((const __m256i*)(blk + 16));
            const __m256i bit = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(sub)), _mm256_set1_epi8(1));
            c = _mm256_or_si256(c, _mm256_slli_epi16(bit, 4));
        }
        return c;
    } else if constexpr (F == Q6_K) {
        const int h = sub / 4, j = sub % 4;
        const __m256i ql = _mm256_loadu_si256((const __m256i*)(blk + h * 64 + (j & 1) * 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i*)(blk + 128 + h * 32));
        const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(ql, _mm_cvtsi32_si128(4 * (j >> 1))), low4);
        const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j)), _mm256_set1_epi8(3));
        return _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
    } else {
        const __m128i raw = _mm_loadu_si128((const __m128i*)(blk + codes_at<F>()));
        __m256i c = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low4);
        if constexpr (F == Q5_0 || F == Q5_1) {  // bit e of qh is element e's fifth bit
            const __m256i spread = _mm256_shuffle_epi8(
                _mm256_set1_epi32((int)u32(blk + (F == Q5_0 ? 2 : 4))),
                _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
                                 3, 3, 3));
            const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
            c = _mm256_or_si256(c, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit),
                                                    _mm256_set1_epi8(16)));
        }
        return c;
    }
}

// Eight int32 lanes summing to sum_e code_e * xq_e (minus offset * sum xq for Q4_0/Q5_0), exactly.
template <int F> static inline __m256i lanes(__m256i c, __m256i x, int32_t xsum) {
    // Signed codes (Q8_0, Q6_K): |c| meets x * sign c.
    const __m256i u = signed_codes<F>() ? _mm256_sign_epi8(c, c) : c;
    const __m256i v = signed_codes<F>() ? _mm256_sign_epi8(x, c) : x;
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, v);  // the same sums in one instruction
#else
    // Pairs first: at most 2 * 128 * 127 = 32512 (Q8_0), 2 * 32 * 127 (Q6_K): no int16 saturation.
    __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, v), _mm256_set1_epi16(1));
#endif
    if constexpr (offset<F>() != 0) p = _mm256_sub_epi32(p, _mm256_setr_epi32(offset<F>() * xsum, 0, 0, 0, 0, 0, 0, 0));
    return p;
}
#endif

// The sub-block's 32 codes as ints in element order (signed for Q8_0 and Q6_K).
template <int F> static inline void codes_scalar(const uint8_t* blk, int sub, int* c) {
    if constexpr (F == Q8_0) {
        for (int l = 0; l < 32; ++l) c[l] = (int8_t)blk[2 + l];
    } else if constexpr (F == Q4_K || F == Q5_K) {
        const uint8_t* qs = blk + (F == Q4_K ? 16 : 48) + (sub / 2) * 32;
        for (int l = 0; l < 32; ++l) {
            c[l] = (qs[l] >> (4 * (sub & 1))) & 15;
            if (F == Q5_K) c[l] |= ((blk[16 + l] >> sub) & 1) << 4;
        }
    } else if constexpr (F == Q6_K) {
        const int h = sub / 4, j = sub % 4;
        const uint8_t* ql = blk + h * 64 + (j & 1) * 32;
        const uint8_t* qh = blk + 128 + h * 32;
        for (int l = 0; l < 32; ++l) c[l] = (((ql[l] >> (4 * (j >> 1))) & 15) | (((qh[l] >> (2 * j)) & 3) << 4)) - 32;
    } else {
        const uint8_t* qs = blk + codes_at<F>();
        const uint32_t qh = F == Q5_0 || F == Q5_1 ? u32(blk + (F == Q5_0 ? 2 : 4)) : 0;
        for (int l = 0; l < 16; ++l) {
            c[l] = (qs[l] & 15) | (int)(((qh >> l) & 1) << 4);
            c[l + 16] = (qs[l] >> 4) | (int)(((qh >> (l + 16)) & 1) << 4);
        }
    }
}

// One weight row against MT quantized activation rows x0..x0+MT-1: y[m * ldy]. Each block's codes are
// unpacked once for the MT rows; every output is the same operations whatever MT is. Measured slower at
// M = 1 and not kept: two weight rows at a time (the second row's loads stalled), and eight outputs per
// vector with each block's lanes summed to one integer first (the horizontal adds cost more than they save).
template <int F, int MT> static void dot_tile(const uint8_t* row, const Q8Act& a, int64_t x0, float* y, int64_t ldy) {
    constexpr int bytes = Traits<F>::bytes;
#ifdef TL_AVX2
    // Even and odd blocks feed two chains per output (a row's chain of FMAs is otherwise the bound).
    __m256 acc[2][MT];
    alignas(16) float tail[2][MT] = {};
    for (int m = 0; m < MT; ++m) acc[0][m] = acc[1][m] = _mm256_setzero_ps();
    alignas(32) float ks[16];  // K formats: the scales of the current block (k_scales, blocks.h)
    auto block = [&](int64_t b, __m256* acc_, float* tail_) {  // x block b: sub-block b % subs of a weight block
        const uint8_t* blk = row + b / subs<F>() * bytes;
        const int sub = (int)(b % subs<F>());
        float dw, dw1, mw;
        if constexpr (F == Q4_1 || F == Q5_1) {  // d and m converted together
            const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)u32(blk)));
            dw = dw1 = _mm_cvtss_f32(dm);
            mw = _mm_cvtss_f32(_mm_movehdup_ps(dm));
        } else if constexpr (subs<F>() > 1) {  // a K block's scales, all at its first sub-block, in vectors
            if (sub == 0) k_scales<F>(blk, ks);
            dw = ks[F == Q6_K ? 2 * sub : sub], dw1 = ks[F == Q6_K ? 2 * sub + 1 : sub];
            mw = F == Q6_K ? 0.0f : -ks[8 + sub];
        } else {
            sub_scales<F>(blk, sub, &dw, &dw1, &mw);
        }
        const __m256i c = codes<F>(blk, sub);
        if constexpr (MT >= 4 && F != Q6_K) {  // MT rows' d_w * d_x and tails in one operation each
            __m256 dd8;
            if constexpr (MT == 8)
                dd8 = _mm256_mul_ps(_mm256_set1_ps(dw), _mm256_loadu_ps(a.dt + b * a.m + x0));
            else
                dd8 = _mm256_castps128_ps256(_mm_mul_ps(_mm_set1_ps(dw), _mm_loadu_ps(a.dt + b * a.m + x0)));
            for (int m = 0; m < MT; ++m) {
                const int64_t i = (x0 + m) * a.kb + b;
                const __m256i p = lanes<F>(c, _mm256_loadu_si256((const __m256i*)(a.q + i * 32)), a.sum[i]);
                const __m256 dd = _mm256_permutevar8x32_ps(dd8, _mm256_set1_epi32(m));
                acc_[m] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc_[m]);
            }
            if constexpr (has_min<F>()) {
                for (int h = 0; h < MT; h += 4) {
                    const __m128 s4 = _mm_loadu_ps(a.st + b * a.m + x0 + h);
                    _mm_storeu_ps(tail_ + h, _mm_add_ps(_mm_loadu_ps(tail_ + h), _mm_mul_ps(_mm_set1_ps(mw), s4)));
                }
            }
        } else {
            for (int m = 0; m < MT; ++m) {
                const int64_t i = (x0 + m) * a.kb + b;
                const __m256i p = lanes<F>(c, _mm256_loadu_si256((const __m256i*)(a.q + i * 32)), a.sum[i]);
                const __m256 dd = F == Q6_K ? _mm256_set_m128(_mm_set1_ps(dw1 * a.d[i]), _mm_set1_ps(dw * a.d[i]))
                                            : _mm256_set1_ps(dw * a.d[i]);
                acc_[m] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc_[m]);
                if constexpr (has_min<F>()) tail_[m] += mw * a.s[i];
            }
        }
    };
    int64_t b = 0;
    for (; b + 2 <= a.kb; b += 2) {
        block(b, acc[0], tail[0]);
        block(b + 1, acc[1], tail[1]);
    }
    if (b < a.kb) block(b, acc[0], tail[0]);
    for (int m = 0; m < MT; ++m)
        y[m * ldy] = hsum(_mm256_add_ps(acc[0][m], acc[1][m])) + (tail[0][m] + tail[1][m]);
#else
    float acc[MT][8] = {}, tail[MT] = {};
    int c[32];
    for (int64_t b = 0; b < a.kb; ++b) {
        const uint8_t* blk = row + b / subs<F>() * bytes;
        const int sub = (int)(b % subs<F>());
        float dw, dw1, mw;
        sub_scales<F>(blk, sub, &dw, &dw1, &mw);
        codes_scalar<F>(blk, sub, c);
        for (int m = 0; m < MT; ++m) {
            const int64_t i = (x0 + m) * a.kb + b;
            const int8_t* xq = a.q + i * 32;
            int32_t p[8] = {};
            for (int l = 0; l < 32; ++l) p[l / 4] += c[l] * xq[l];
            p[0] -= offset<F>() * a.sum[i];
            for (int j = 0; j < 8; ++j) acc[m][j] += ((j < 4 ? dw : dw1) * a.d[i]) * (float)p[j];
            if constexpr (has_min<F>()) tail[m] += mw * a.s[i];
        }
    }
    for (int m = 0; m < MT; ++m) {
        const float* v = acc[m];
        y[m * ldy] = (((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]))) + tail[m];
    }
#endif
}

struct Q8Job {
    const uint8_t* data;
    int64_t n, stride, m, chunk;
    const Q8Act* a;
    float* y;
};

template <int F, int MT> static void q8_rows(const Q8Job& j, int64_t m0, int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) dot_tile<F, MT>(j.data + n * j.stride, *j.a, m0, j.y + m0 * j.n + n, j.n);
}

template <int F> static void q8_chunk(void* ctx, int64_t c) {
    const Q8Job& j = *static_cast<const Q8Job*>(ctx);
    const int64_t n0 = c * j.chunk, n1 = std::min(j.n, n0 + j.chunk);
    // 32 weight rows (about 11 KB of Q4_1 at K = 576) stay in L1 while the activation rows pass in fours.
    for (int64_t r0 = n0; r0 < n1; r0 += 32) {
        const int64_t r1 = std::min(n1, r0 + 32);
        int64_t m0 = 0;
#if defined(__AVX512VL__)  // 32 vector registers: eights of activation rows (16 accumulators) fit
        for (; m0 + 8 <= j.m; m0 += 8) q8_rows<F, 8>(j, m0, r0, r1);
#endif
        for (; m0 < j.m; m0 += 4) {
            switch (std::min<int64_t>(4, j.m - m0)) {
                case 4: q8_rows<F, 4>(j, m0, r0, r1); break;
                case 3: q8_rows<F, 3>(j, m0, r0, r1); break;
                case 2: q8_rows<F, 2>(j, m0, r0, r1); break;
                default: q8_rows<F, 1>(j, m0, r0, r1); break;
            }
        }
    }
}

static int64_t q8_chunk_rows(int64_t n, int threads) {  // as qmatmul.cpp: multiples of 16, ~4 per thread
    const int64_t per = (n + 4 * threads - 1) / (4 * threads);
    return std::max<int64_t>(16, (per + 15) / 16 * 16);
}

struct Q8Buffers {  // per calling thread, grown as needed
    std::vector<int8_t> q;
    std::vector<float> d, s, dt, st;
    std::vector<int32_t> sum;
};

static Q8Act quantize(const float* x, int64_t m, int64_t k, Q8Buffers& buf) {
    const int64_t kb = k / 32;
    if ((int64_t)buf.q.size() < m * k) buf.q.resize(m * k);
    if ((int64_t)buf.d.size() < m * kb) {
        for (auto* v : {&buf.d, &buf.s, &buf.dt, &buf.st}) v->resize(m * kb);
        buf.sum.resize(m * kb);
    }
    for (int64_t i = 0; i < m; ++i)
        quantize_row(x + i * k, k, buf.q.data() + i * k, buf.d.data() + i * kb, buf.sum.data() + i * kb,
                     buf.s.data() + i * kb);
    if (m >= 4)
        for (int64_t i = 0; i < m; ++i)
            for (int64_t b = 0; b < kb; ++b) {
                buf.dt[b * m + i] = buf.d[i * kb + b];
                buf.st[b * m + i] = buf.s[i * kb + b];
            }
    return Q8Act{buf.q.data(), buf.d.data(), buf.sum.data(), buf.s.data(), buf.dt.data(), buf.st.data(), kb, m};
}

}  // namespace tl

extern "C" {

// y[m, n] = x[m, k] @ W^T with x quantized per 32 (see above). Returns 0, or -1 for a format without it.
int tl_qmatmul_q8(int fmt, const float* x, int64_t m, int64_t k, const uint8_t* data, int64_t n, int64_t stride,
                  float* y, int threads) {
    using namespace tl;
    void (*chunk)(void*, int64_t);
    switch (fmt) {
        case Q4_0: chunk = q8_chunk<Q4_0>; break;
        case Q4_1: chunk = q8_chunk<Q4_1>; break;
        case Q5_0: chunk = q8_chunk<Q5_0>; break;
        case Q5_1: chunk = q8_chunk<Q5_1>; break;
        case Q8_0: chunk = q8_chunk<Q8_0>; break;
        case Q4_K: chunk = q8_chunk<Q4_K>; break;
        case Q5_K: chunk = q8_chunk<Q5_K>; break;
        case Q6_K: chunk = q8_chunk<Q6_K>; break;
        default: return -1;
    }
    static thread_local Q8Buffers buf;
    const Q8Act a = quantize(x, m, k, buf);
    Q8Job job{data, n, stride, m, q8_chunk_rows(n, threads), &a, y};
    pool().run(chunk, &job, (n + job.chunk - 1) / job.chunk, threads);
    return 0;
}

// The quantization tl_qmatmul_q8 applies to x [m, k]: q [m, k], d and sum [m, k / 32] (for tests).
void tl_quantize_q8(const float* x, int64_t m, int64_t k, int8_t* q, float* d, int32_t* sum) {
    std::vector<float> s(m * (k / 32));
    for (int64_t i = 0; i < m; ++i)
        tl::quantize_row(x + i * k, k, q + i * k, d + i * (k / 32), sum + i * (k / 32), s.data() + i * (k / 32));
}

// 1 for the formats tl_qmatmul_q8 runs, else 0.
int tl_q8_supported(int fmt) {
    switch (fmt) {
        case tl::Q4_0: case tl::Q4_1: case tl::Q5_0: case tl::Q5_1: case tl::Q8_0: case tl::Q4_K: case tl::Q5_K:
        case tl::Q6_K: return 1;
        default: return 0;
    }
}
}
