// Reading a block's bytes, shared by every format's decode: fp16 and 32-bit fields, bytes widened into vector
// lanes, and on AVX-512 scales read from memory (from_memory).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "../simd.h"

namespace tl {

static inline float f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
#ifdef TL_AVX2
    return _cvtsh_ss(h);
#else
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
    if (exp == 0) {  // zero or subnormal: man * 2^-24 is exact in float32
        float v = std::ldexp((float)man, -24);
        return sign ? -v : v;
    }
    bits = exp == 31 ? (sign | 0x7F800000u | (man << 13)) : (sign | ((exp + 112) << 23) | (man << 13));
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
#endif
}

static inline uint32_t u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

#ifdef TL_AVX2
static inline __m256i bytes8(const uint8_t* p) {  // 8 bytes -> 8 x int32, zero-extended
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)p));
}
#endif

#if defined(TL_AVX2) && defined(__AVX512F__)
// p, hidden from the optimizer, so that values read through it are loaded from memory. A block's scales kept
// in registers cost a shuffle and a register broadcast each (valignd or vmovshdup, vbroadcastss) on the ports
// the decode's own shuffles use; broadcast from memory, each is a load (the one-row kernels take it for every
// format with more than one scale; Q8_0's one scale is faster in a register). Nothing in a loop that keeps its
// accumulators in an array may read through it: with the asm, GCC kept that array in memory, stored every
// iteration (decode16's STORED = false).
template <int N> static inline const float* from_memory(const float* p) {
    asm volatile("" : "+r"(p) : "m"(*(const float(*)[N])p));  // the N floats at p are read (so stored first)
    return p;
}

// Lanes 8-15 of v (AVX512F alone, no DQ).
static inline __m256 high256(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

// 16 bytes zero-extended into sixteen 32-bit lanes.
static inline __m512i bytes16(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)p)); }
#endif

#ifdef TL_NEON
// 16 unsigned or signed bytes as four float32x4 (elements 0-3, ..., 12-15).
static inline void widen16(uint8x16_t v, float32x4_t* out) {
    const uint16x8_t a = vmovl_u8(vget_low_u8(v)), b = vmovl_u8(vget_high_u8(v));
    out[0] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(a)));
    out[1] = vcvtq_f32_u32(vmovl_u16(vget_high_u16(a)));
    out[2] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(b)));
    out[3] = vcvtq_f32_u32(vmovl_u16(vget_high_u16(b)));
}
static inline void widen16(int8x16_t v, float32x4_t* out) {
    const int16x8_t a = vmovl_s8(vget_low_s8(v)), b = vmovl_s8(vget_high_s8(v));
    out[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(a)));
    out[1] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(a)));
    out[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(b)));
    out[3] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(b)));
}
#endif

}  // namespace tl
