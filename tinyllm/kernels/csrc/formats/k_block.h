// Q4_K, Q5_K: blocks of 256 elements, eight sub-blocks of 32: fp16 d and dmin, twelve bytes packing eight 6-bit
// scales and eight 6-bit mins (k_scale_min), for Q5_K 32 bytes of fifth bits (bit s of byte l: element l of
// sub-block s), then 128 bytes of nibbles (sub-blocks 2i and 2i + 1 the low and high nibbles of bytes 32i..).
// A weight is (d * scale) * q - (dmin * min). Sub-blocks 2i and 2i + 1 share their bytes: decoded as a pair.
#pragma once
#include "base.h"

namespace tl {
namespace {  // internal linkage, as static functions: GCC inlines them as it did those

// The 6-bit scale and min of sub-block s (0..7) from the 12 packed bytes.
static inline void k_scale_min(const uint8_t* s, int sub, int* sc, int* mn) {
    if (sub < 4) {
        *sc = s[sub] & 63;
        *mn = s[sub + 4] & 63;
    } else {
        *sc = (s[sub + 4] & 0x0F) | ((s[sub - 4] >> 6) << 4);
        *mn = (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
    }
}

#ifdef TL_AVX2
// The eight scales (sc) and mins (mn) of k_scale_min, a byte each, four at a time in a 32-bit word (scalar
// integer ops, off the vector ports the decode keeps busy): with a, b, c the words at s, s + 4, s + 8, t < 4:
// sc = a & 63, mn = b & 63; t >= 4: sc = c & 15 | (a >> 6) << 4, mn = c >> 4 | (b >> 6) << 4, per byte.
static inline void k_scale_min8(const uint8_t* s, uint64_t* sc, uint64_t* mn) {
    const uint32_t a = u32(s), b = u32(s + 4), c = u32(s + 8), six = 0x3F3F3F3Fu, four = 0x0F0F0F0Fu, top = 0x30303030u;
    *sc = (a & six) | (uint64_t)((c & four) | ((a >> 2) & top)) << 32;
    *mn = (b & six) | (uint64_t)(((c >> 4) & four) | ((b >> 2) & top)) << 32;
}
#endif

template <bool FIVE> struct KBlock : FormatBase {
    static constexpr bool five = FIVE;
    static constexpr int qs_off = five ? 48 : 16;  // the nibbles
    static constexpr int group_subs = 2;
    static constexpr bool block_scales = true;
    static constexpr bool has_min = true;  // dmin, negated in the packed form
    static constexpr int code_high_bits = five ? 1 : 0;

    static inline void decode32_scalar(const uint8_t* b, int sub, float* out) {
        int sc, mn;
        k_scale_min(b + 4, sub, &sc, &mn);
        const float dl = f16(b) * (float)sc, ml = f16(b + 2) * (float)mn;
        const uint8_t* qs = b + qs_off + (sub / 2) * 32;
        const int shift = 4 * (sub & 1);
        for (int l = 0; l < 32; ++l) {
            int q = (qs[l] >> shift) & 15;
            if (five) q |= ((b[16 + l] >> sub) & 1) << 4;
            out[l] = dl * (float)q - ml;
        }
    }

    static inline void codes32(const uint8_t* b, int sub, uint32_t* w, int* s0, int* s1) {
        k_scale_min(b + 4, sub, s0, s1);
        const uint8_t* qs = b + qs_off + (sub / 2) * 32;
        for (int m = 0; m < 8; ++m) {
            w[m] = (u32(qs + 4 * m) >> (4 * (sub & 1))) & 0x0F0F0F0Fu;
            if (five) w[m] |= ((u32(b + 16 + 4 * m) >> sub) & 0x01010101u) << 4;
        }
    }

    // The block's sub-block scales as the reference computes them (an fp16 times a 6-bit integer, exact in
    // float32): ks[t] = d * sc_t, ks[8 + t] = dmin * mn_t for t = 0..7. One call per block instead of unpacking
    // per sub-block; on AVX-512 one 16-lane conversion and product.
#if defined(TL_AVX2) && defined(__AVX512F__)
    static inline void k_scales(const uint8_t* b, float* ks) {
        uint64_t sc, mn;
        k_scale_min8(b + 4, &sc, &mn);
        const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_set_epi64x((int64_t)mn, (int64_t)sc)));
        const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)u32(b)));  // d, dmin
        const __m512 d = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                               _mm512_castps128_ps512(dm));
        _mm512_storeu_ps(ks, _mm512_mul_ps(d, q));
    }
#elif defined(TL_AVX2)
    static inline void k_scales(const uint8_t* b, float* ks) {
        uint64_t sc, mn;
        k_scale_min8(b + 4, &sc, &mn);
        const __m256 q0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((int64_t)sc)));
        const __m256 q1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((int64_t)mn)));
        _mm256_storeu_ps(ks, _mm256_mul_ps(_mm256_set1_ps(f16(b)), q0));
        _mm256_storeu_ps(ks + 8, _mm256_mul_ps(_mm256_set1_ps(f16(b + 2)), q1));
    }
#elif defined(TL_NEON)
    static inline void k_scales(const uint8_t* b, float* ks) {
        const float d = f16(b), dmin = f16(b + 2);
        for (int t = 0; t < 8; ++t) {
            int sc, mn;
            k_scale_min(b + 4, t, &sc, &mn);
            ks[t] = d * (float)sc;
            ks[8 + t] = dmin * (float)mn;
        }
    }
#endif

#ifdef TL_AVX2
    static inline void decode32(const uint8_t* b, int sub, __m256* w, const float* ks) {
        const __m256i low4 = _mm256_set1_epi32(15);
        const __m256 dl = _mm256_set1_ps(ks[sub]), nml = _mm256_set1_ps(-ks[8 + sub]);
        const uint8_t* qs = b + qs_off + (sub / 2) * 32;
        const __m128i shift = _mm_cvtsi32_si128(4 * (sub & 1));
        for (int g = 0; g < 4; ++g) {
            __m256i q = _mm256_and_si256(_mm256_srl_epi32(bytes8(qs + 8 * g), shift), low4);
            if constexpr (five) {
                const __m256i h = _mm256_srl_epi32(bytes8(b + 16 + 8 * g), _mm_cvtsi32_si128(sub));
                q = _mm256_or_si256(q, _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(1)), 4));
            }
            w[g] = _mm256_fmadd_ps(dl, _mm256_cvtepi32_ps(q), nml);  // dl * q exact: 22 bits
        }
    }

    // Sub-blocks 2g and 2g + 1 into w[0..3] and w[4..7], their 32 code bytes loaded once.
    static inline void decode_group8(const uint8_t* b, int g, const float* ks, __m256* w) {
        const __m256i low4 = _mm256_set1_epi32(15);
        const uint8_t* qs = b + qs_off + g * 32;
        const __m128i s0 = _mm_cvtsi32_si128(2 * g), s1 = _mm_cvtsi32_si128(2 * g + 1);
        const __m256i sixteen = _mm256_set1_epi32(16);
        for (int v = 0; v < 4; ++v) {
            const __m256i q = bytes8(qs + 8 * v);
            __m256i q0 = _mm256_and_si256(q, low4), q1 = _mm256_srli_epi32(q, 4);
            if constexpr (five) {  // bit s of byte l of qh: element l's fifth bit in sub-block s
                const __m256i h = _mm256_slli_epi32(bytes8(b + 16 + 8 * v), 4);
                q0 = _mm256_or_si256(q0, _mm256_and_si256(_mm256_srl_epi32(h, s0), sixteen));
                q1 = _mm256_or_si256(q1, _mm256_and_si256(_mm256_srl_epi32(h, s1), sixteen));
            }
            w[v] = _mm256_fmadd_ps(_mm256_set1_ps(ks[2 * g]), _mm256_cvtepi32_ps(q0),
                                   _mm256_set1_ps(-ks[8 + 2 * g]));  // dl * q exact: 22 bits
            w[4 + v] = _mm256_fmadd_ps(_mm256_set1_ps(ks[2 * g + 1]), _mm256_cvtepi32_ps(q1),
                                       _mm256_set1_ps(-ks[8 + 2 * g + 1]));
        }
    }
#endif

#if defined(TL_AVX2) && defined(__AVX512F__)
    template <bool STORED> static inline void decode16(const uint8_t* b, int sub, const float* ks, __m512& w01, __m512& w23) {
        const __m512i low4 = _mm512_set1_epi32(15);
        const __m512 dl = _mm512_set1_ps(ks[sub]), nml = _mm512_set1_ps(-ks[8 + sub]);
        const uint8_t* qs = b + qs_off + (sub / 2) * 32;
        const __m128i shift = _mm_cvtsi32_si128(4 * (sub & 1));
        __m512i q0 = _mm512_and_si512(_mm512_srl_epi32(bytes16(qs), shift), low4);
        __m512i q1 = _mm512_and_si512(_mm512_srl_epi32(bytes16(qs + 16), shift), low4);
        if constexpr (five) {
            const __m128i hs = _mm_cvtsi32_si128(sub);
            const __m512i one = _mm512_set1_epi32(1);
            q0 = _mm512_or_si512(q0, _mm512_slli_epi32(_mm512_and_si512(_mm512_srl_epi32(bytes16(b + 16), hs), one), 4));
            q1 = _mm512_or_si512(q1, _mm512_slli_epi32(_mm512_and_si512(_mm512_srl_epi32(bytes16(b + 32), hs), one), 4));
        }
        w01 = _mm512_fmadd_ps(dl, _mm512_cvtepi32_ps(q0), nml);  // dl * q exact: 22 bits
        w23 = _mm512_fmadd_ps(dl, _mm512_cvtepi32_ps(q1), nml);
    }
#endif

#ifdef TL_NEON
    static inline void decode32(const uint8_t* b, int sub, V8* w, const float* ks) {
        float32x4_t q[8];  // elements 4i..4i+3, as float
        const uint8_t* qs = b + qs_off + (sub / 2) * 32;
        for (int h = 0; h < 2; ++h) {
            const uint8x16_t v = vld1q_u8(qs + 16 * h);
            uint8x16_t c = (sub & 1) ? vshrq_n_u8(v, 4) : vandq_u8(v, vdupq_n_u8(15));
            if constexpr (five)  // bit `sub` of byte l of qh: element l's fifth bit
                c = vorrq_u8(c, vandq_u8(vtstq_u8(vld1q_u8(b + 16 + 16 * h), vdupq_n_u8((uint8_t)(1 << sub))), vdupq_n_u8(16)));
            widen16(c, q + 4 * h);
        }
        const float32x4_t dl = vdupq_n_f32(ks[sub]), nml = vdupq_n_f32(-ks[8 + sub]);
        for (int i = 0; i < 8; ++i) q[i] = vfmaq_f32(nml, dl, q[i]);  // dl * q exact: 22 bits
        for (int g = 0; g < 4; ++g) w[g] = {q[2 * g], q[2 * g + 1]};
    }
#endif
};

}  // namespace
}  // namespace tl
