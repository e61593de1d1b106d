// Q6_K: 256 elements in 210 bytes: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, sixteen signed 8-bit
// scales (one per 16 elements), then an fp16 d. Half h (128 elements) takes 64 low bytes and 32 high ones:
// sub-block 4h + j's element l is nibble j >> 1 of low byte 64h + 32 (j & 1) + l, with bits 2j, 2j + 1 of high
// byte 128 + 32h + l above it. A weight is (d * scale) * (q - 32). A quarter (four sub-blocks) shares its
// bytes: decoded together.
#pragma once
#include "base.h"

namespace tl {
namespace {  // internal linkage, as static functions: GCC inlines them as it did those

template <> struct Format<Q6_K> : FormatBase {
    static constexpr int group_subs = 4;
    static constexpr bool block_scales = true;
    static constexpr int d_offset = 208, code_offset = 32, code_high_bits = 2;
    static constexpr bool scale_halves = true;
    // two weight rows at once at one activation row: four rows of its four decoded sub-blocks spill
    static constexpr int rows_at_m1 = 2;

    static inline void decode32_scalar(const uint8_t* b, int sub, float* out) {
        const int h = sub / 4, j = sub % 4;
        const uint8_t* ql = b + h * 64 + (j & 1) * 32;
        const uint8_t* qh = b + 128 + h * 32;
        const float d = f16(b + 208);
        const float d0 = d * (float)(int8_t)b[192 + h * 8 + j * 2], d1 = d * (float)(int8_t)b[192 + h * 8 + j * 2 + 1];
        for (int l = 0; l < 32; ++l) {
            int q = (((ql[l] >> (4 * (j >> 1))) & 15) | (((qh[l] >> (2 * j)) & 3) << 4)) - 32;
            out[l] = (l < 16 ? d0 : d1) * (float)q;
        }
    }

    static inline void codes32(const uint8_t* b, int sub, uint32_t* w, int* s0, int* s1) {
        const int h = sub / 4, j = sub % 4;
        *s0 = (int8_t)b[192 + h * 8 + j * 2];
        *s1 = (int8_t)b[192 + h * 8 + j * 2 + 1];
        const uint8_t* ql = b + h * 64 + (j & 1) * 32;
        const uint8_t* qh = b + 128 + h * 32;
        for (int m = 0; m < 8; ++m)
            w[m] = ((u32(ql + 4 * m) >> (4 * (j >> 1))) & 0x0F0F0F0Fu) | ((u32(qh + 4 * m) >> (2 * j)) & 0x03030303u) << 4;
    }

    // The sixteen scales as the reference computes them, ks[i] = d * scale_i (an fp16 times an 8-bit integer,
    // exact in float32); sub-block t uses 2t and 2t + 1.
#if defined(TL_AVX2) && defined(__AVX512F__)
    static inline void k_scales(const uint8_t* b, float* ks) {
        const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(b + 192))));
        _mm512_storeu_ps(ks, _mm512_mul_ps(_mm512_set1_ps(f16(b + 208)), q));
    }
#elif defined(TL_AVX2)
    static inline void k_scales(const uint8_t* b, float* ks) {
        const __m128i raw = _mm_loadu_si128((const __m128i*)(b + 192));
        const __m256 d = _mm256_set1_ps(f16(b + 208));
        _mm256_storeu_ps(ks, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw))));
        _mm256_storeu_ps(ks + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(raw, 8)))));
    }
#elif defined(TL_NEON)
    static inline void k_scales(const uint8_t* b, float* ks) {
        const float d = f16(b + 208);
        for (int i = 0; i < 16; ++i) ks[i] = d * (float)(int8_t)b[192 + i];
    }
#endif

#ifdef TL_AVX2
    static inline void decode32(const uint8_t* b, int sub, __m256* w, const float* ks) {
        const __m256i low4 = _mm256_set1_epi32(15);
        const int h = sub / 4, j = sub % 4;
        const uint8_t* ql = b + h * 64 + (j & 1) * 32;
        const uint8_t* qh = b + 128 + h * 32;
        const __m256 d0 = _mm256_set1_ps(ks[2 * sub]), d1 = _mm256_set1_ps(ks[2 * sub + 1]);
        const __m128i sl = _mm_cvtsi32_si128(4 * (j >> 1)), sh = _mm_cvtsi32_si128(2 * j);
        for (int g = 0; g < 4; ++g) {
            const __m256i lo = _mm256_and_si256(_mm256_srl_epi32(bytes8(ql + 8 * g), sl), low4);
            const __m256i hi = _mm256_and_si256(_mm256_srl_epi32(bytes8(qh + 8 * g), sh), _mm256_set1_epi32(3));
            const __m256i q = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
            w[g] = _mm256_mul_ps(g < 2 ? d0 : d1, _mm256_cvtepi32_ps(q));
        }
    }

    // Quarter g (sub-blocks 4g..4g + 3) into w[0..15], its 64 low and 32 high bytes loaded once.
    static inline void decode_group8(const uint8_t* b, int g, const float* ks, __m256* w) {
        const __m256i low4 = _mm256_set1_epi32(15);
        const uint8_t* ql = b + g * 64;
        const uint8_t* qh = b + 128 + g * 32;
        const __m256i top = _mm256_set1_epi32(0x30), off = _mm256_set1_epi32(32);
        for (int v = 0; v < 4; ++v) {
            const __m256i l0 = bytes8(ql + 8 * v), l1 = bytes8(ql + 32 + 8 * v), h = bytes8(qh + 8 * v);
            const __m256i lo[4] = {_mm256_and_si256(l0, low4), _mm256_and_si256(l1, low4), _mm256_srli_epi32(l0, 4),
                                   _mm256_srli_epi32(l1, 4)};
            const __m256i hi[4] = {_mm256_and_si256(_mm256_slli_epi32(h, 4), top), _mm256_and_si256(_mm256_slli_epi32(h, 2), top),
                                   _mm256_and_si256(h, top), _mm256_and_si256(_mm256_srli_epi32(h, 2), top)};
            for (int j = 0; j < 4; ++j) {  // bits 2j, 2j + 1 of the high byte -> 4, 5
                const __m256i q = _mm256_sub_epi32(_mm256_or_si256(lo[j], hi[j]), off);
                w[4 * j + v] = _mm256_mul_ps(_mm256_set1_ps(ks[2 * (4 * g + j) + v / 2]), _mm256_cvtepi32_ps(q));
            }
        }
    }
#endif

#if defined(TL_AVX2) && defined(__AVX512F__)
    template <bool STORED> static inline void decode16(const uint8_t* b, int sub, const float* ks, __m512& w01, __m512& w23) {
        const __m512i low4 = _mm512_set1_epi32(15);
        const int h = sub / 4, j = sub % 4;
        const uint8_t* ql = b + h * 64 + (j & 1) * 32;
        const uint8_t* qh = b + 128 + h * 32;
        const __m128i sl = _mm_cvtsi32_si128(4 * (j >> 1)), sh = _mm_cvtsi32_si128(2 * j);
        const __m512i three = _mm512_set1_epi32(3), off = _mm512_set1_epi32(32);
        __m512 w[2];
        for (int half = 0; half < 2; ++half) {
            const __m512i lo = _mm512_and_si512(_mm512_srl_epi32(bytes16(ql + 16 * half), sl), low4);
            const __m512i hi = _mm512_and_si512(_mm512_srl_epi32(bytes16(qh + 16 * half), sh), three);
            const __m512i q = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), off);
            w[half] = _mm512_mul_ps(_mm512_set1_ps(ks[2 * sub + half]), _mm512_cvtepi32_ps(q));
        }
        w01 = w[0];
        w23 = w[1];
    }

    // Quarter g into w[0..7]: w[2j], w[2j + 1] as decode16 gives sub-block 4g + j, each byte loaded once.
    template <bool STORED> static inline void decode_group(const uint8_t* b, int g, const float* ks, __m512* w) {
        const __m512i low4 = _mm512_set1_epi32(15);
        const uint8_t* ql = b + g * 64;
        const __m512i l[4] = {bytes16(ql), bytes16(ql + 16), bytes16(ql + 32), bytes16(ql + 48)};
        const __m512i h[2] = {bytes16(b + 128 + g * 32), bytes16(b + 144 + g * 32)};
        const __m512i top = _mm512_set1_epi32(0x30), off = _mm512_set1_epi32(32);
        for (int j = 0; j < 4; ++j)
            for (int half = 0; half < 2; ++half) {
                const __m512i ll = l[(j & 1) * 2 + half];
                const __m512i lo = j < 2 ? _mm512_and_si512(ll, low4) : _mm512_srli_epi32(ll, 4);
                const __m512i hh = h[half];  // bits 2j, 2j + 1 -> 4, 5
                const __m512i hi = _mm512_and_si512(j == 0 ? _mm512_slli_epi32(hh, 4) : j == 1 ? _mm512_slli_epi32(hh, 2)
                                                    : j == 2 ? hh : _mm512_srli_epi32(hh, 2), top);
                const __m512i q = _mm512_sub_epi32(_mm512_or_si512(lo, hi), off);
                w[2 * j + half] = _mm512_mul_ps(_mm512_set1_ps(ks[2 * (4 * g + j) + half]), _mm512_cvtepi32_ps(q));
            }
    }
#endif

#ifdef TL_NEON
    static inline void decode32(const uint8_t* b, int sub, V8* w, const float* ks) {
        float32x4_t q[8];  // elements 4i..4i+3, as float
        const int h = sub / 4, j = sub % 4;
        const uint8_t* ql = b + h * 64 + (j & 1) * 32;
        const uint8_t* qh = b + 128 + h * 32;
        const int8x16_t sl = vdupq_n_s8((int8_t)(-4 * (j >> 1))), sh = vdupq_n_s8((int8_t)(-2 * j));
        for (int half = 0; half < 2; ++half) {
            const uint8x16_t lo = vandq_u8(vshlq_u8(vld1q_u8(ql + 16 * half), sl), vdupq_n_u8(15));
            const uint8x16_t hi = vandq_u8(vshlq_u8(vld1q_u8(qh + 16 * half), sh), vdupq_n_u8(3));
            widen16(vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8(hi, 4))), vdupq_n_s8(32)), q + 4 * half);
            const float32x4_t d = vdupq_n_f32(ks[2 * sub + half]);
            for (int i = 4 * half; i < 4 * half + 4; ++i) q[i] = vmulq_f32(d, q[i]);
        }
        for (int g = 0; g < 4; ++g) w[g] = {q[2 * g], q[2 * g + 1]};
    }
#endif
};

}  // namespace
}  // namespace tl
