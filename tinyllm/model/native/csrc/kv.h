// Elements of the KV cache as the native decode step reads and writes them: float32, float16 or bfloat16 rows.
// A stored value is the float32 one rounded to nearest, ties to even, as torch rounds it when the module path
// writes the same storage; a read widens it exactly. load8 widens eight elements into one vector (V8).
#pragma once
#include "blocks.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tl {

enum KvType { KV_F32 = 0, KV_F16 = 1, KV_BF16 = 2 };

struct half_t {
    uint16_t bits;
};
struct bf16_t {
    uint16_t bits;
};

static inline float to_float(float x) { return x; }
static inline float to_float(half_t x) { return f16(reinterpret_cast<const uint8_t*>(&x.bits)); }
static inline float to_float(bf16_t x) {
    const uint32_t bits = (uint32_t)x.bits << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

static inline void store(float x, float* out) { *out = x; }

static inline void store(float x, half_t* out) {
#ifdef TL_AVX2
    out->bits = _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT);
#else
    uint32_t u;
    std::memcpy(&u, &x, 4);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    u &= 0x7FFFFFFFu;
    if (u > 0x7F800000u) {
        out->bits = sign | 0x7E00u;  // NaN
    } else if (u >= 0x477FF000u) {
        out->bits = sign | 0x7C00u;  // 65520 and above round to infinity
    } else if (u < 0x38800000u) {
        // below 2^-14: a multiple of 2^-24 (x * 2^24 is exact), rounded to nearest even by the default mode
        float a;
        std::memcpy(&a, &u, 4);
        out->bits = sign | (uint16_t)std::nearbyint(a * 16777216.0f);
    } else {
        uint32_t h = (u - 0x38000000u) >> 13;  // exponent rebased from 127 to 15, top 10 mantissa bits
        const uint32_t rest = u & 0x1FFFu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
        out->bits = sign | (uint16_t)h;
    }
#endif
}

static inline void store(float x, bf16_t* out) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    out->bits = std::isnan(x) ? (uint16_t)0x7FC0u : (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

#ifdef TL_NEON
static inline V8 load8(const float* p) { return v8_load(p); }
static inline V8 load8(const half_t* p) {
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(&p->bits));
    return {vcvt_f32_f16(vget_low_f16(h)), vcvt_f32_f16(vget_high_f16(h))};
}
static inline V8 load8(const bf16_t* p) {
    const uint16x8_t b = vld1q_u16(&p->bits);
    return {vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(b), 16)), vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(b), 16))};
}
#endif
#ifdef TL_AVX2
static inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
static inline __m256 load8(const half_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }
static inline __m256 load8(const bf16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
#endif

}  // namespace tl
