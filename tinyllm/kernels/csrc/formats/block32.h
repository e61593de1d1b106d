// Q4_0, Q4_1, Q5_0, Q5_1: blocks of 32 elements with an fp16 scale d, for Q4_1/Q5_1 an fp16 minimum m after it
// (HAS_MIN), for Q5_0/Q5_1 a 32-bit word of fifth bits (FIVE), then 16 bytes of nibbles: element l < 16 in byte
// l's low nibble, 16 + l in its high one. A weight is d * (q - 8 | 16), or d * q + m.
#pragma once
#include "base.h"

namespace tl {
namespace {  // internal linkage, as static functions: GCC inlines them as it did those

#ifdef TL_AVX2
// Bit (8g + i) of qh, for i = 0..7, as 0 or 16 in lane i.
static inline __m256i high_bits(__m256i qh, int g) {
    const __m256i mask = _mm256_sllv_epi32(_mm256_set1_epi32(1 << (8 * g)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_and_si256(_mm256_cmpeq_epi32(_mm256_and_si256(qh, mask), mask), _mm256_set1_epi32(16));
}
#endif

template <bool HAS_MIN, bool FIVE> struct Block32 : FormatBase {
    static constexpr bool has_min = HAS_MIN, five = FIVE;
    static constexpr int qh_off = has_min ? 4 : 2, qs_off = qh_off + (five ? 4 : 0);
    static constexpr int code_offset = has_min ? 0 : five ? 16 : 8, code_high_bits = five ? 1 : 0;
    // tables, shuffles and integer operations (decode16): off the FMAs' ports, so the tile takes it in
    static constexpr bool decode_in_tile = true;

    static inline void decode32_scalar(const uint8_t* b, int, float* out) {
        const float d = f16(b), m = has_min ? f16(b + 2) : 0.0f;
        const uint32_t qh = five ? u32(b + qh_off) : 0;
        const uint8_t* qs = b + qs_off;
        for (int l = 0; l < 16; ++l) {
            int lo = qs[l] & 15, hi = qs[l] >> 4;
            if (five) {
                lo |= ((qh >> l) & 1) << 4;
                hi |= ((qh >> (l + 16)) & 1) << 4;
            }
            if (has_min) {
                out[l] = d * (float)lo + m;
                out[l + 16] = d * (float)hi + m;
            } else {
                const int off = five ? 16 : 8;
                out[l] = d * (float)(lo - off);
                out[l + 16] = d * (float)(hi - off);
            }
        }
    }

    static inline void codes32(const uint8_t* b, int, uint32_t* w, int* s0, int* s1) {
        *s0 = *s1 = 0;
        const uint32_t qh = five ? u32(b + qh_off) : 0;
        const uint8_t* qs = b + qs_off;
        for (int m = 0; m < 4; ++m) {
            w[m] = u32(qs + 4 * m) & 0x0F0F0F0Fu;
            w[m + 4] = (u32(qs + 4 * m) >> 4) & 0x0F0F0F0Fu;
            if (five) {
                w[m] |= spread4(qh >> (4 * m)) << 4;
                w[m + 4] |= spread4(qh >> (16 + 4 * m)) << 4;
            }
        }
    }

#ifdef TL_AVX2
    static inline void decode32(const uint8_t* b, int, __m256* w, const float*) {
        const __m256i low4 = _mm256_set1_epi32(15);
        // d (and m, the next two bytes) converted together: one conversion, then broadcasts.
        const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(has_min ? (int)u32(b) : (int)*(const uint16_t*)b));
        const __m256 d = _mm256_broadcastss_ps(dm);
        const __m256i a = bytes8(b + qs_off), c = bytes8(b + qs_off + 8);
        __m256i q[4] = {_mm256_and_si256(a, low4), _mm256_and_si256(c, low4), _mm256_srli_epi32(a, 4),
                        _mm256_srli_epi32(c, 4)};
        if constexpr (five) {
            const __m256i qh = _mm256_set1_epi32((int)u32(b + qh_off));
            for (int g = 0; g < 4; ++g) q[g] = _mm256_or_si256(q[g], high_bits(qh, g));
        }
        if constexpr (has_min) {
            const __m256 m = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
            for (int g = 0; g < 4; ++g) w[g] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(q[g]), m);  // d * q exact
        } else {
            const __m256i off = _mm256_set1_epi32(five ? 16 : 8);
            for (int g = 0; g < 4; ++g) w[g] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(q[g], off)));
        }
    }
#endif

#if defined(TL_AVX2) && defined(__AVX512F__)
    // STORED: d and m stored and broadcast from memory (from_memory), the cheaper for one row; else broadcast in
    // registers, for kernels that keep many accumulators in arrays.
    template <bool STORED> static inline void decode16(const uint8_t* b, int, const float*, __m512& w01, __m512& w23) {
        const __m512i low4 = _mm512_set1_epi32(15);
        alignas(16) float dm[4];  // d (and m) converted together
        _mm_store_ps(dm, _mm_cvtph_ps(_mm_cvtsi32_si128(has_min ? (int)u32(b) : (int)*(const uint16_t*)b)));
        const float* dmp = STORED ? from_memory<4>(dm) : dm;
        const __m512 d = _mm512_set1_ps(dmp[0]);
        const __m512i q = bytes16(b + qs_off);
        const __m512i hi4 = _mm512_srli_epi32(q, 4);
        const __m512 q16 = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        // Q4_0, Q4_1, Q5_0: a block's weights take 16 or 32 values, one per q. Each is worked out once, by the
        // operation decode32 applies to every element (d * (q - offset), or d * q + m in one rounding), into a
        // table the q's then index (vpermps): the same values with fewer vector ops (faster for all three on one
        // row; Q5_1's two tables, each with its own FMA, were slower than its FMAs, so it keeps them).
        if constexpr (!five) {  // the index's low 4 bits: q's byte holds lo in bits 0-3 and hi in 4-7
            const __m512 table = has_min ? _mm512_fmadd_ps(d, q16, _mm512_set1_ps(dmp[1]))
                                         : _mm512_mul_ps(d, _mm512_sub_ps(q16, _mm512_set1_ps(8.0f)));
            w01 = _mm512_permutexvar_ps(q, table);
            w23 = _mm512_permutexvar_ps(hi4, table);
        } else {
            const uint32_t qh = u32(b + qh_off);  // bit l: element l's fifth bit
            const __m512i sixteen = _mm512_set1_epi32(16), lo4 = _mm512_and_si512(q, low4);
            const __m512i lo = _mm512_mask_or_epi32(lo4, (__mmask16)(qh & 0xFFFF), lo4, sixteen);  // q | bit << 4
            const __m512i hi = _mm512_mask_or_epi32(hi4, (__mmask16)(qh >> 16), hi4, sixteen);
            if constexpr (has_min) {
                const __m512 m = _mm512_set1_ps(dmp[1]);
                w01 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(lo), m);  // d * q exact
                w23 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(hi), m);
            } else {  // tables of q = 0..15 and 16..31, chosen by the index's fifth bit
                const __m512 t0 = _mm512_mul_ps(d, _mm512_sub_ps(q16, _mm512_set1_ps(16.0f)));
                const __m512 t1 = _mm512_mul_ps(d, q16);
                w01 = _mm512_permutex2var_ps(t0, lo, t1);
                w23 = _mm512_permutex2var_ps(t0, hi, t1);
            }
        }
    }
#endif

#ifdef TL_NEON
    static inline void decode32(const uint8_t* b, int, V8* w, const float*) {
        float32x4_t q[8];  // elements 4i..4i+3, as float
        const uint8x16_t qs = vld1q_u8(b + qs_off);
        uint8x16_t lo = vandq_u8(qs, vdupq_n_u8(15)), hi = vshrq_n_u8(qs, 4);
        if constexpr (five) {  // bit l of qh: element l's fifth bit, as 16 in byte l
            const uint32_t qh = u32(b + qh_off);
            const uint8x16_t bit = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
            const uint8x16_t l16 = vcombine_u8(vdup_n_u8((uint8_t)qh), vdup_n_u8((uint8_t)(qh >> 8)));
            const uint8x16_t h16 = vcombine_u8(vdup_n_u8((uint8_t)(qh >> 16)), vdup_n_u8((uint8_t)(qh >> 24)));
            lo = vorrq_u8(lo, vandq_u8(vtstq_u8(l16, bit), vdupq_n_u8(16)));
            hi = vorrq_u8(hi, vandq_u8(vtstq_u8(h16, bit), vdupq_n_u8(16)));
        }
        if constexpr (has_min) {
            widen16(lo, q);
            widen16(hi, q + 4);
        } else {
            const int8x16_t off = vdupq_n_s8(five ? 16 : 8);
            widen16(vsubq_s8(vreinterpretq_s8_u8(lo), off), q);
            widen16(vsubq_s8(vreinterpretq_s8_u8(hi), off), q + 4);
        }
        const float32x4_t d = vdupq_n_f32(f16(b));
        if constexpr (has_min) {
            const float32x4_t m = vdupq_n_f32(f16(b + 2));
            for (int i = 0; i < 8; ++i) q[i] = vfmaq_f32(m, d, q[i]);  // d * q exact
        } else {
            for (int i = 0; i < 8; ++i) q[i] = vmulq_f32(d, q[i]);
        }
        for (int g = 0; g < 4; ++g) w[g] = {q[2 * g], q[2 * g + 1]};
    }
#endif
};

}  // namespace
}  // namespace tl
