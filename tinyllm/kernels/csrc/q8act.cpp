// y[M, N] = x[M, K] @ W[N, K]^T with the activations quantized to 8 bits (weights="native-int8").
// Each 32-element block of an activation row becomes d = max|x| / 127 and q = x * (1 / d) rounded to nearest
// even (so |q| <= 127), the arithmetic llama.cpp's q8 activations use. The weight comes packed (q8act.h):
// sixteen rows' codes interleaved so that one vector lane is one output. Per output and block, the 32
// products code * q are summed exactly in an int32 (a VNNI instruction takes four per lane, else two), less
// offset * sum q (Q4_0, Q5_0, Q6_K, and Q8_0 where its codes are made unsigned), and
//     acc = fma(float(I), d_w * d_x, acc)       [Q6_K: once per half, with its own scale]
//     acc = fma(m_w, d_x * sum q, acc)         [formats with a minimum]
// in K order, one chain per output. Every output is those operations in that order whatever M is, however
// many threads run, and in the AVX-512, AVX2 and portable builds alike, so a token's row does not depend on
// the rows beside it. With 24-bit activations (weights="native-int24") a row is three rows of 8-bit limbs
// (q8act.h): each runs as above, and the row's outputs are their sum, the last limb's first.
#include "q8act.h"
#include "pool.h"

#include <algorithm>
#include <cmath>
#include <vector>

#if defined(TL_AVX2) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define TL_Q8_512 1  // sixteen outputs per vector
#endif

namespace tl {

Pool& pool();

// Quantizes one row of k floats (k a multiple of 32). A block holding a NaN or an infinity gets d = NaN and
// q = 0, so its outputs are NaN; a block whose d would be subnormal (every |x| < 127 * 2^-126) counts as zeros.
// Block b's results go to q + 32 * b * stride and d, sum, half, s [b * stride]: blocks of the rows interleave.
static void quantize_row(const float* x, int64_t k, int64_t stride, int8_t* q0, float* d0, int32_t* sum0,
                         int32_t* half0, float* s0) {
    for (int64_t b = 0; b < k / 32; ++b, x += 32) {
        int8_t* q = q0 + 32 * b * stride;
        float *d = d0 + b * stride, *s = s0 + b * stride;
        int32_t *sum = sum0 + b * stride, *half = half0 + b * stride;
        float amax = 0.0f;
        bool bad = false;
#ifdef TL_AVX2
        {
            const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
            const __m256 largest = _mm256_set1_ps(3.4028234663852886e38f);
            __m256 mx = _mm256_setzero_ps(), finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
            for (int g = 0; g < 4; ++g) {
                const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + 8 * g), magnitude);
                finite = _mm256_and_ps(finite, _mm256_cmp_ps(a, largest, _CMP_LE_OQ));  // false for NaN and inf
                mx = _mm256_max_ps(mx, a);
            }
            bad = _mm256_movemask_ps(finite) != 0xFF;
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        }
#else
        for (int l = 0; l < 32; ++l) {
            const float a = std::fabs(x[l]);
            bad |= !(a <= 3.4028234663852886e38f);  // NaN or infinite
            amax = a > amax ? a : amax;
        }
#endif
        float db = bad ? NAN : amax / 127.0f;
        if (db < 1.17549435e-38f) db = 0.0f;  // a subnormal d (1 / d might overflow): the block counts as zeros
        const float id = db != 0.0f && !bad ? 1.0f / db : 0.0f;
        int32_t total = 0, first = 0;
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
            const __m256i lo = _mm256_add_epi32(v[0], v[1]), all = _mm256_add_epi32(lo, _mm256_add_epi32(v[2], v[3]));
            alignas(32) int32_t t[2][8];
            _mm256_store_si256((__m256i*)t[0], lo);
            _mm256_store_si256((__m256i*)t[1], all);
            for (int l = 0; l < 8; ++l) first += t[0][l], total += t[1][l];
#else
            for (int l = 0; l < 32; ++l) {
                q[l] = (int8_t)(int)std::nearbyint(x[l] * id);
                total += q[l];
                first += l < 16 ? q[l] : 0;
            }
#endif
        }
        *d = db;
        *sum = total;
        *half = first;
        *s = db * (float)total;
    }
}

namespace {

// Scale vector i of sub-block `sub` of `unit`, as float32: i = 0 the scale D (Q6_K: of elements 0..15), i = 1
// the minimum M or Q6_K's scale of elements 16..31 (q8act.h). 16 lanes (given h, the unit's d or m as float32),
// 8 (half h), 4 (quarter qq) or one (row r). For the K formats the int8 times the float16, exact: the float32
// the reference forms. A head of BF16 (q8act.h: MXFP4's d) widens as bfloat16: its bits, 16 places up.
#ifdef TL_Q8_512
template <bool BF16 = false> inline __m512 half16(const uint8_t* p) {
    const __m256i h = _mm256_loadu_si256((const __m256i*)p);
    if constexpr (BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

template <int F> inline __m512 scales16(__m512 h, const uint8_t* sub, int i) {
    if constexpr (!Packed<F>::k) return h;
    const __m128i s = _mm_loadu_si128((const __m128i*)(sub + 16 * i));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(s)), h);
}
#elif defined(TL_AVX2)
template <int F> inline __m256 scales8(const uint8_t* unit, const uint8_t* sub, int i, int h) {
    using P = Packed<F>;
    const __m128i raw = _mm_loadu_si128((const __m128i*)(unit + 32 * (i == 1 && P::min) + 16 * h));
    const __m256 f = P::bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16))
                             : _mm256_cvtph_ps(raw);
    if constexpr (!P::k) return f;
    const __m128i s = _mm_loadl_epi64((const __m128i*)(sub + 16 * i + 8 * h));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s)), f);
}
#elif defined(TL_NEON)
template <int F> inline float32x4_t scales4(const uint8_t* unit, const uint8_t* sub, int i, int qq) {
    using P = Packed<F>;
    const uint16_t* p = (const uint16_t*)(unit + 32 * (i == 1 && P::min)) + 4 * qq;
    const float32x4_t f = P::bf16 ? vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16))
                                  : vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
    if constexpr (!P::k) return f;
    int32_t four;
    std::memcpy(&four, sub + 16 * i + 4 * qq, 4);
    const int16x8_t s = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(four)));
    return vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(s))), f);
}
#else
template <int F> inline float scale1(const uint8_t* unit, const uint8_t* sub, int i, int r) {
    using P = Packed<F>;
    const uint8_t* at = unit + 32 * (i == 1 && P::min) + 2 * r;
    float f;
    if constexpr (P::bf16) {
        const uint32_t bits = (uint32_t)(at[0] | at[1] << 8) << 16;
        std::memcpy(&f, &bits, 4);
    } else {
        f = f16(at);
    }
    if constexpr (!P::k) return f;
    return (float)(int8_t)sub[16 * i + r] * f;
}
#endif

#ifdef TL_AVX2
// At small M the packed weight is one stream read in address order, and on the machine measured (an AMD EPYC
// VM, AVX-512) the hardware prefetchers keep too few of its lines in flight. Fetching each line AHEAD bytes
// before it is read (a unit's head line with its first sub-block, then each sub-block's lines) raises one
// thread's rate at M = 1 and M = 8, in both builds; 8 KB ahead is slower than 16 KB, and 24 or 32 KB no faster.
// Into L2 (prefetcht1) rather than L1: the 24-bit mode's three rows ran faster so, the 8-bit mode's level
// (docs/benchmarks.md, "Kernel notes", has the figures).
constexpr int64_t AHEAD = 16384;

template <int F> inline void prefetch(const uint8_t* unit, const uint8_t* sub, int sb) {
    if (sb == 0) _mm_prefetch((const char*)unit + AHEAD, _MM_HINT_T1);
    for (int64_t at = 0; at < Packed<F>::sub_bytes; at += 64) _mm_prefetch((const char*)sub + AHEAD + at, _MM_HINT_T1);
}
#endif

// The packed codes of j (0..7) for the rows of one vector: 64 bytes (AVX-512) or the 32 at `at` (AVX2).
#ifdef TL_Q8_512
template <int F> inline void codes512(const uint8_t* c, __m512i* w) {
    using P = Packed<F>;
    if constexpr (P::nibbles) {
        const __m512i low4 = _mm512_set1_epi8(15);
        for (int j = 0; j < 4; ++j) {
            const __m512i v = _mm512_loadu_si512(c + 64 * j);
            w[j] = _mm512_and_si512(v, low4);
            w[j + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        }
        if constexpr (P::high > 0) {
            const __m512i mask = _mm512_set1_epi8((char)(((1 << P::high) - 1) << 4));
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) {  // the bits above the nibble, moved to bit 4 (16-bit shifts: the mask
                                           // drops what crosses from the neighbouring byte)
                const __m512i v = _mm512_loadu_si512(c + P::plane(j));
                const int at = P::bit(j);
                const __m512i h = at <= 4 ? _mm512_slli_epi16(v, 4 - at) : _mm512_srli_epi16(v, at - 4);
                w[j] = _mm512_ternarylogic_epi32(w[j], h, mask, 0xF8);  // w | (h & mask)
            }
        }
    } else {
        for (int j = 0; j < 8; ++j)
            w[j] = _mm512_xor_si512(_mm512_loadu_si512(c + 64 * j), _mm512_set1_epi8((char)0x80));  // + 128
    }
}

// start + the exact sum over j in [j0, j1) of code * q for 16 outputs (x: the row's block of 32 q): two
// chains, each four bytes of x broadcast from memory as the instruction's own operand ({1to16}; the compiler
// emits a separate broadcast load for _mm512_set1_epi32, one more micro-op per 64 products, and ran slower).
inline __m512i dot(const __m512i* w, const int8_t* x, int j0, int j1, __m512i start) {
    __m512i c[2] = {start, _mm512_setzero_si512()};
    for (int j = j0; j < j1; ++j) {
        using word = int32_t __attribute__((may_alias));  // four of the int8 q, read as one operand
        const word* x4 = reinterpret_cast<const word*>(x + 4 * j);
        asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(c[(j - j0) & 1]) : "v"(w[j]), "m"(*x4));
    }
    return _mm512_add_epi32(c[0], c[1]);
}

// One group of 16 weight rows against MT activation rows from x0: y[m * ldy + 0..15], lanes `keep`.
template <int F, int MT>
void tile(const uint8_t* g, const Q8Act& a, int64_t x0, float* y, int64_t ldy, __mmask16 keep) {
    using P = Packed<F>;
    constexpr int off = P::sign ? 128 : P::offset;
    const int64_t kb = a.kb, M = a.m;
    const int8_t* q = a.q + x0 * 32;  // the tile's rows, block b of row m at b * M + m
    const float *d = a.d + x0, *s = a.s + x0;
    const int32_t *sum = a.sum + x0, *half = a.half + x0;
    __m512 acc[MT];
#pragma GCC unroll 8
    for (int m = 0; m < MT; ++m) acc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < kb; b += P::subs) {
        const uint8_t* unit = P::unit_of(g, b);
        const __m512 h0 = half16<P::bf16>(unit), h1 = P::min ? half16(unit + 32) : h0;  // d, and m or -dmin
        for (int sb = 0; sb < P::subs; ++sb, q += 32 * M, d += M, s += M, sum += M, half += M) {
            const uint8_t* sub = unit + P::head + sb * P::sub_bytes;
            prefetch<F>(unit, sub, sb);
            __m512i w[8];
            codes512<F>(sub + P::ints, w);
            const __m512 dw = scales16<F>(h0, sub, 0), dw1 = scales16<F>(P::halves ? h0 : h1, sub, 1);
#pragma GCC unroll 8
            for (int m = 0; m < MT; ++m) {
                const int64_t i = m;  // this row at the current block
                const int8_t* x = q + i * 32;
                const __m512 dx = _mm512_set1_ps(d[i]);
                if constexpr (P::halves) {
                    const __m512i lo = dot(w, x, 0, 4, _mm512_set1_epi32(-off * half[i]));
                    const __m512i hi = dot(w, x, 4, 8, _mm512_set1_epi32(-off * (sum[i] - half[i])));
                    acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), _mm512_mul_ps(dw, dx), acc[m]);
                    acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_mul_ps(dw1, dx), acc[m]);
                } else {
                    const __m512i start = off != 0 ? _mm512_set1_epi32(-off * sum[i]) : _mm512_setzero_si512();
                    const __m512i t = dot(w, x, 0, 8, start);
                    acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dw, dx), acc[m]);
                    if constexpr (P::min) acc[m] = _mm512_fmadd_ps(dw1, _mm512_set1_ps(s[i]), acc[m]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < MT; ++m) _mm512_mask_storeu_ps(y + m * ldy, keep, acc[m]);
}

template <int F> void group(const uint8_t* g, const Q8Act& a, float* y, int64_t n, int valid) {
    const __mmask16 keep = (__mmask16)((1u << valid) - 1);
    int64_t m0 = 0;
    for (; m0 + 8 <= a.m; m0 += 8) tile<F, 8>(g, a, m0, y + m0 * n, n, keep);
    switch (a.m - m0) {
        case 7: tile<F, 7>(g, a, m0, y + m0 * n, n, keep); break;
        case 6: tile<F, 6>(g, a, m0, y + m0 * n, n, keep); break;
        case 5: tile<F, 5>(g, a, m0, y + m0 * n, n, keep); break;
        case 4: tile<F, 4>(g, a, m0, y + m0 * n, n, keep); break;
        case 3: tile<F, 3>(g, a, m0, y + m0 * n, n, keep); break;
        case 2: tile<F, 2>(g, a, m0, y + m0 * n, n, keep); break;
        case 1: tile<F, 1>(g, a, m0, y + m0 * n, n, keep); break;
        default: break;
    }
}
#elif defined(TL_AVX2)
// The packed codes of j for eight rows (bytes 32 h .. 32 h + 31 of j's vector).
template <int F> inline __m256i codes256(const uint8_t* c, int j) {
    using P = Packed<F>;
    if constexpr (P::nibbles) {
        const __m256i v = _mm256_loadu_si256((const __m256i*)(c + 64 * (j % 4)));
        __m256i w = _mm256_and_si256(j < 4 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(15));
        if constexpr (P::high > 0) {
            const __m256i h = _mm256_loadu_si256((const __m256i*)(c + P::plane(j)));
            const int at = P::bit(j);
            const __m256i mask = _mm256_set1_epi8((char)(((1 << P::high) - 1) << 4));
            const __m256i moved = at <= 4 ? _mm256_slli_epi16(h, 4 - at) : _mm256_srli_epi16(h, at - 4);
            w = _mm256_or_si256(w, _mm256_and_si256(moved, mask));
        }
        return w;
    } else {
        return _mm256_loadu_si256((const __m256i*)(c + 64 * j));
    }
}

// Eight outputs' exact sums of code * q over one j: pairs in int16 first, at most 2 * 128 * 127 = 32512 (Q8_0,
// by its codes' magnitudes against q with their signs), 2 * 63 * 127 otherwise: no saturation.
template <int F> inline __m256i dot1(__m256i w, int32_t x4) {
    const __m256i x = _mm256_set1_epi32(x4);
    const __m256i p = Packed<F>::sign ? _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
                                      : _mm256_maddubs_epi16(w, x);
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

// Eight weight rows (half h of a group) against MT activation rows from x0: y[m * ldy + 0..valid).
template <int F, int MT>
void tile(const uint8_t* g, const Q8Act& a, int64_t x0, float* y, int64_t ldy, int h, int valid) {
    using P = Packed<F>;
    __m256 acc[MT];
    for (int m = 0; m < MT; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < a.kb; ++b) {
        const uint8_t *unit = P::unit_of(g, b), *sub = P::sub_of(g, b), *c = sub + P::ints + 32 * h;
        prefetch<F>(unit, sub, (int)(b % P::subs));
        __m256i lo[MT], hi[MT];
        int32_t xs[MT][8];
        for (int m = 0; m < MT; ++m) {
            std::memcpy(xs[m], a.q + (b * a.m + x0 + m) * 32, 32);
            lo[m] = hi[m] = _mm256_setzero_si256();
        }
        for (int j = 0; j < 8; ++j) {
            const __m256i w = codes256<F>(c, j);
            for (int m = 0; m < MT; ++m) {
                if (j < 4) lo[m] = _mm256_add_epi32(lo[m], dot1<F>(w, xs[m][j]));
                else hi[m] = _mm256_add_epi32(hi[m], dot1<F>(w, xs[m][j]));
            }
        }
        const __m256 dw = scales8<F>(unit, sub, 0, h), dw1 = P::min || P::halves ? scales8<F>(unit, sub, 1, h) : dw;
        for (int m = 0; m < MT; ++m) {
            const int64_t i = b * a.m + x0 + m;
            const __m256 dx = _mm256_set1_ps(a.d[i]);
            if constexpr (P::halves) {
                const __m256i l = _mm256_sub_epi32(lo[m], _mm256_set1_epi32(P::offset * a.half[i]));
                const __m256i u = _mm256_sub_epi32(hi[m], _mm256_set1_epi32(P::offset * (a.sum[i] - a.half[i])));
                acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(l), _mm256_mul_ps(dw, dx), acc[m]);
                acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u), _mm256_mul_ps(dw1, dx), acc[m]);
            } else {
                __m256i s = _mm256_add_epi32(lo[m], hi[m]);
                if constexpr (P::offset != 0) s = _mm256_sub_epi32(s, _mm256_set1_epi32(P::offset * a.sum[i]));
                acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, dx), acc[m]);
                if constexpr (P::min) acc[m] = _mm256_fmadd_ps(dw1, _mm256_set1_ps(a.s[i]), acc[m]);
            }
        }
    }
    for (int m = 0; m < MT; ++m) {
        if (valid == 8) {
            _mm256_storeu_ps(y + m * ldy, acc[m]);
        } else {
            alignas(32) float t[8];
            _mm256_store_ps(t, acc[m]);
            std::copy(t, t + valid, y + m * ldy);
        }
    }
}

#elif defined(TL_NEON)
// The packed codes of j (0..7) for rows 4 qq .. 4 qq + 3 (bytes 16 qq .. 16 qq + 15 of j's vector), as signed
// bytes (every unsigned code is below 64).
template <int F> inline int8x16_t codes128(const uint8_t* c, int j, int qq) {
    using P = Packed<F>;
    if constexpr (P::nibbles) {
        const uint8x16_t v = vld1q_u8(c + 64 * (j % 4) + 16 * qq);
        uint8x16_t w = j < 4 ? vandq_u8(v, vdupq_n_u8(15)) : vshrq_n_u8(v, 4);
        if constexpr (P::high > 0) {
            const uint8x16_t plane = vld1q_u8(c + P::plane(j) + 16 * qq);
            const uint8x16_t h = vshlq_u8(plane, vdupq_n_s8((int8_t)(4 - P::bit(j))));  // to bit 4
            w = vorrq_u8(w, vandq_u8(h, vdupq_n_u8((uint8_t)(((1 << P::high) - 1) << 4))));
        }
        return vreinterpretq_s8_u8(w);
    } else {
        return vld1q_s8((const int8_t*)(c + 64 * j + 16 * qq));
    }
}

// Four weight rows (quarter qq of a group) against MT activation rows from x0: y[m * ldy + 0..valid). Integer
// sums are exact in any order, and the float operations per output are AVX2's, so the same bits.
template <int F, int MT>
void tile(const uint8_t* g, const Q8Act& a, int64_t x0, float* y, int64_t ldy, int qq, int valid) {
    using P = Packed<F>;
    float32x4_t acc[MT];
    for (int m = 0; m < MT; ++m) acc[m] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < a.kb; ++b) {
        const uint8_t *unit = P::unit_of(g, b), *sub = P::sub_of(g, b), *c = sub + P::ints;
        int32x4_t lo[MT][2], hi[MT][2];  // pairwise partial sums: rows 0, 1 and rows 2, 3
        for (int m = 0; m < MT; ++m) lo[m][0] = lo[m][1] = hi[m][0] = hi[m][1] = vdupq_n_s32(0);
        for (int j = 0; j < 8; ++j) {
            const int8x16_t w = codes128<F>(c, j, qq);
            for (int m = 0; m < MT; ++m) {
                int32_t x4;
                std::memcpy(&x4, a.q + (b * a.m + x0 + m) * 32 + 4 * j, 4);
                const int8x16_t x = vreinterpretq_s8_s32(vdupq_n_s32(x4));
                int32x4_t* t = j < 4 ? lo[m] : hi[m];
                t[0] = vpadalq_s16(t[0], vmull_s8(vget_low_s8(w), vget_low_s8(x)));
                t[1] = vpadalq_s16(t[1], vmull_high_s8(w, x));
            }
        }
        const float32x4_t dw = scales4<F>(unit, sub, 0, qq);
        const float32x4_t dw1 = P::min || P::halves ? scales4<F>(unit, sub, 1, qq) : dw;
        for (int m = 0; m < MT; ++m) {
            const int64_t i = b * a.m + x0 + m;
            const float32x4_t dx = vdupq_n_f32(a.d[i]);
            const int32x4_t l = vpaddq_s32(lo[m][0], lo[m][1]), u = vpaddq_s32(hi[m][0], hi[m][1]);  // per row
            if constexpr (P::halves) {
                const int32x4_t lh = vsubq_s32(l, vdupq_n_s32(P::offset * a.half[i]));
                const int32x4_t uh = vsubq_s32(u, vdupq_n_s32(P::offset * (a.sum[i] - a.half[i])));
                acc[m] = vfmaq_f32(acc[m], vcvtq_f32_s32(lh), vmulq_f32(dw, dx));
                acc[m] = vfmaq_f32(acc[m], vcvtq_f32_s32(uh), vmulq_f32(dw1, dx));
            } else {
                int32x4_t t = vaddq_s32(l, u);
                if constexpr (P::offset != 0) t = vsubq_s32(t, vdupq_n_s32(P::offset * a.sum[i]));
                acc[m] = vfmaq_f32(acc[m], vcvtq_f32_s32(t), vmulq_f32(dw, dx));
                if constexpr (P::min) acc[m] = vfmaq_f32(acc[m], dw1, vdupq_n_f32(a.s[i]));
            }
        }
    }
    for (int m = 0; m < MT; ++m) {
        alignas(16) float t[4];
        vst1q_f32(t, acc[m]);
        std::copy(t, t + valid, y + m * ldy);
    }
}

#else
// The portable path: the same operations per output, one output at a time.
template <int F> void group(const uint8_t* g, const Q8Act& a, float* y, int64_t n, int valid) {
    using P = Packed<F>;
    for (int64_t m = 0; m < a.m; ++m) {
        for (int r = 0; r < valid; ++r) {
            float acc = 0.0f;
            for (int64_t b = 0; b < a.kb; ++b) {
                const uint8_t *unit = P::unit_of(g, b), *sub = P::sub_of(g, b), *c = sub + P::ints;
                const float dw = scale1<F>(unit, sub, 0, r);
                const float dw1 = P::min || P::halves ? scale1<F>(unit, sub, 1, r) : 0.0f;
                const int64_t i = b * a.m + m;
                const int8_t* x = a.q + i * 32;
                int32_t lo = 0, hi = 0;
                for (int e = 0; e < 32; ++e) {
                    const int j = e / 4, at = 4 * r + e % 4;
                    int code;
                    if constexpr (P::nibbles) {
                        code = j < 4 ? c[64 * j + at] & 15 : c[64 * (j - 4) + at] >> 4;
                        if constexpr (P::high > 0)
                            code |= ((c[P::plane(j) + at] >> P::bit(j)) & ((1 << P::high) - 1)) << 4;
                    } else {
                        code = (int)(int8_t)c[64 * j + at];
                    }
                    (e < 16 ? lo : hi) += code * x[e];
                }
                if (P::halves) {
                    acc = std::fma((float)(lo - P::offset * a.half[i]), dw * a.d[i], acc);
                    acc = std::fma((float)(hi - P::offset * (a.sum[i] - a.half[i])), dw1 * a.d[i], acc);
                } else {
                    acc = std::fma((float)(lo + hi - P::offset * a.sum[i]), dw * a.d[i], acc);
                    if (P::min) acc = std::fma(dw1, a.s[i], acc);
                }
            }
            y[m * n + r] = acc;
        }
    }
}
#endif

#if defined(TL_SIMD) && !defined(TL_Q8_512)
// A group's rows in parts of one vector each (8 rows on AVX2, 4 on NEON), up to four activation rows a tile.
#ifdef TL_NEON
constexpr int VEC_ROWS = 4;
#else
constexpr int VEC_ROWS = 8;
#endif

template <int F> void group(const uint8_t* g, const Q8Act& a, float* y, int64_t n, int valid) {
    for (int part = 0; part < GROUP / VEC_ROWS && VEC_ROWS * part < valid; ++part) {
        const int v = std::min(VEC_ROWS, valid - VEC_ROWS * part);
        float* yp = y + VEC_ROWS * part;
        int64_t m0 = 0;
        for (; m0 + 4 <= a.m; m0 += 4) tile<F, 4>(g, a, m0, yp + m0 * n, n, part, v);
        switch (a.m - m0) {
            case 3: tile<F, 3>(g, a, m0, yp + m0 * n, n, part, v); break;
            case 2: tile<F, 2>(g, a, m0, yp + m0 * n, n, part, v); break;
            case 1: tile<F, 1>(g, a, m0, yp + m0 * n, n, part, v); break;
            default: break;
        }
    }
}
#endif

struct Job {
    const uint8_t* packed;
    int64_t n, group;  // bytes of a group's units
    const Q8Act* a;
    float* y;
    Chunks chunks;  // of groups
};

template <int F> void chunk(void* ctx, int64_t c) {
    const Job& j = *static_cast<const Job*>(ctx);
    for (int64_t g = j.chunks.start[c]; g < j.chunks.start[c + 1]; ++g)
        group<F>(j.packed + g * j.group, *j.a, j.y + g * GROUP, j.n, (int)std::min<int64_t>(GROUP, j.n - g * GROUP));
}

struct Buffers {  // per calling thread, grown as needed
    std::vector<int8_t> q;
    std::vector<float> d, s;
    std::vector<int32_t> sum, half;
};

struct QuantJob {
    const float* x;
    int64_t k, rows, limbs;  // input rows per chunk, rows per input row
    Buffers* buf;
};

// r = x - q * d per element of a row quantized at q0, d0 with the stride of quantize_row, one rounding each.
static void remainder(const float* x, int64_t k, int64_t stride, const int8_t* q0, const float* d0, float* r) {
    for (int64_t b = 0; b < k / 32; ++b) {
        const int8_t* q = q0 + 32 * b * stride;
        const float d = d0[b * stride];
        for (int e = 0; e < 32; ++e) r[32 * b + e] = std::fma(-(float)q[e], d, x[32 * b + e]);
    }
}

void quantize_chunk(void* ctx, int64_t c) {
    const QuantJob& j = *static_cast<const QuantJob*>(ctx);
    const int64_t kb = j.k / 32, m = j.buf->d.size() / kb, inputs = m / j.limbs;
    static thread_local std::vector<float> rest;
    if (j.limbs > 1) rest.resize(j.k);
    for (int64_t i = c * j.rows; i < std::min(inputs, (c + 1) * j.rows); ++i) {
        const float* x = j.x + i * j.k;
        for (int64_t l = 0, at = i * j.limbs; l < j.limbs; ++l, ++at) {
            int8_t* q = j.buf->q.data() + at * 32;
            float* d = j.buf->d.data() + at;
            quantize_row(x, j.k, m, q, d, j.buf->sum.data() + at, j.buf->half.data() + at, j.buf->s.data() + at);
            if (l + 1 < j.limbs) remainder(x, j.k, m, q, d, rest.data()), x = rest.data();
        }
    }
}

// y [m, n] = the sum of the limbs' rows of part [m * limbs, n], the last limb first, columns split over threads.
struct SumJob {
    const float* part;
    float* y;
    int64_t m, n, limbs;
    Chunks chunks;  // of columns
};

void sum_limbs(void* ctx, int64_t c) {
    const SumJob& j = *static_cast<const SumJob*>(ctx);
    for (int64_t i = 0; i < j.m; ++i) {
        const float* p = j.part + i * j.limbs * j.n;
        for (int64_t col = j.chunks.start[c]; col < j.chunks.start[c + 1]; ++col) {
            float t = p[(j.limbs - 1) * j.n + col];
            for (int64_t l = j.limbs - 2; l >= 0; --l) t += p[l * j.n + col];
            j.y[i * j.n + col] = t;
        }
    }
}

}  // namespace

Q8Act q8_quantize(const float* x, int64_t m, int64_t k, int threads, int64_t limbs) {
    static thread_local Buffers buf;
    const int64_t kb = k / 32, rows = m * limbs;
    buf.q.resize(rows * k);
    for (auto* v : {&buf.d, &buf.s}) v->resize(rows * kb);
    for (auto* v : {&buf.sum, &buf.half}) v->resize(rows * kb);
    const int64_t per = std::max<int64_t>(16 / limbs, (m + 2 * threads - 1) / (2 * threads));
    QuantJob job{x, k, per, limbs, &buf};
    pool().run(quantize_chunk, &job, (m + per - 1) / per, threads);
    return Q8Act{buf.q.data(), buf.d.data(), buf.sum.data(), buf.half.data(), buf.s.data(), kb, rows, limbs};
}

int q8_matmul(int fmt, const Q8Act& a, const uint8_t* packed, int64_t n, float* y, int threads) {
    void (*run)(void*, int64_t);
    int64_t bytes;
    switch (fmt) {
#define TL_Q8_CASE(F, ...) case F: run = chunk<F>; bytes = Packed<F>::group_bytes(a.kb); break;
        TL_FORMATS(TL_Q8_CASE)
#undef TL_Q8_CASE
        default: return -1;
    }
    static thread_local std::vector<float> part;  // the limbs' rows, summed into y after
    if (a.limbs > 1) part.resize(a.m * n);
    Job job{packed, n, bytes, &a, a.limbs > 1 ? part.data() : y, Chunks((n + GROUP - 1) / GROUP, threads)};
    pool().run(run, &job, job.chunks.count, threads);
    if (a.limbs > 1) {
        SumJob sum{part.data(), y, a.m / a.limbs, n, a.limbs, Chunks((n + 15) / 16, threads)};  // of 16 columns
        for (int64_t c = 0; c <= sum.chunks.count; ++c) sum.chunks.start[c] = std::min(n, 16 * sum.chunks.start[c]);
        pool().run(sum_limbs, &sum, sum.chunks.count, threads);
    }
    return 0;
}

}  // namespace tl

extern "C" {

// y[m, n] = x[m, k] @ W^T with x quantized per 32 as `limbs` 8-bit rows each (see above) and W packed by
// tl_q8_pack. Returns 0, or -1 for a format without it.
int tl_qmatmul_q8(int fmt, const float* x, int64_t m, int64_t k, const uint8_t* packed, int64_t n, float* y,
                  int threads, int64_t limbs) {
    return tl::q8_matmul(fmt, tl::q8_quantize(x, m, k, threads, limbs), packed, n, y, threads);
}

// The quantization tl_qmatmul_q8 applies to x [m, k]: q [m * limbs, k], d and sum [m * limbs, k / 32], limb l
// of row i at row i * limbs + l (for tests).
void tl_quantize_q8(const float* x, int64_t m, int64_t k, int64_t limbs, int8_t* q, float* d, int32_t* sum) {
    const tl::Q8Act a = tl::q8_quantize(x, m, k, 1, limbs);
    m = a.m;
    for (int64_t r = 0; r < m; ++r)
        for (int64_t b = 0; b < a.kb; ++b) {
            std::copy(a.q + (b * m + r) * 32, a.q + (b * m + r + 1) * 32, q + r * k + b * 32);
            d[r * a.kb + b] = a.d[b * m + r];
            sum[r * a.kb + b] = a.sum[b * m + r];
        }
}

// 1 where the kernel runs sixteen outputs a vector with VNNI (AVX-512), else 0.
int tl_q8_vnni512() {
#ifdef TL_Q8_512
    return 1;
#else
    return 0;
#endif
}

// 1 for the formats tl_qmatmul_q8 runs, else 0.
int tl_q8_supported(int fmt) {
    switch (fmt) {
#define TL_Q8_CASE(F, ...) case tl::F:
        TL_FORMATS(TL_Q8_CASE) return 1;
#undef TL_Q8_CASE
        default: return 0;
    }
}
}
