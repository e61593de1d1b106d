// Q8_0: 32 elements in 34 bytes: an fp16 scale d, then 32 signed bytes q. A weight is q * d.
#pragma once
#include "base.h"

namespace tl {
namespace {  // internal linkage, as static functions: GCC inlines them as it did those

template <> struct Format<Q8_0> : FormatBase {
    static constexpr bool signed_codes = true;
    // At one activation row: its lines fetched ahead into L2; two weight rows at once (its 34 bytes per 32
    // weights read slower as four streams a thread). Its decode converts and scales on the FMAs' ports: not in
    // the tile.
    static constexpr bool ahead_into_l2 = true;
    static constexpr int rows_at_m1 = 2;

    static inline void codes32(const uint8_t* b, int, uint32_t* w, int* s0, int* s1) {
        *s0 = *s1 = 0;
        for (int m = 0; m < 8; ++m) w[m] = u32(b + 2 + 4 * m);
    }

    static inline void decode32_scalar(const uint8_t* b, int, float* out) {
        const float d = f16(b);
        for (int l = 0; l < 32; ++l) out[l] = (float)(int8_t)b[2 + l] * d;
    }

#ifdef TL_AVX2
    static inline void decode32(const uint8_t* b, int, __m256* w, const float*) {
        const __m256 d = _mm256_set1_ps(f16(b));
        for (int g = 0; g < 4; ++g)
            w[g] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(b + 2 + 8 * g)))), d);
    }
#endif

#if defined(TL_AVX2) && defined(__AVX512F__)
    template <bool STORED> static inline void decode16(const uint8_t* b, int, const float*, __m512& w01, __m512& w23) {
        const __m512 d = _mm512_set1_ps(f16(b));  // one scale: kept in a register, never from_memory
        w01 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(b + 2)))), d);
        w23 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(b + 18)))), d);
    }
#endif

#ifdef TL_NEON
    static inline void decode32(const uint8_t* b, int, V8* w, const float*) {
        float32x4_t q[8];  // elements 4i..4i+3, as float
        widen16(vld1q_s8((const int8_t*)(b + 2)), q);
        widen16(vld1q_s8((const int8_t*)(b + 18)), q + 4);
        const float32x4_t d = vdupq_n_f32(f16(b));
        for (int i = 0; i < 8; ++i) q[i] = vmulq_f32(q[i], d);
        for (int g = 0; g < 4; ++g) w[g] = {q[2 * g], q[2 * g + 1]};
    }
#endif
};

}  // namespace
}  // namespace tl
