// Which vector path this build takes, and the 8-lane float vector the float matmul's sums are written in.
// TL_AVX2: x86 with AVX2, FMA and F16C; TL_NEON: 64-bit ARM (NEON and its fused multiply-add are baseline
// there); neither (or TL_SCALAR): the portable path. On NEON an 8-lane vector is two 4-lane halves, each
// operation done lane for lane as AVX2 does it (a fused multiply-add is one rounding on both), so a sum
// written with V8 gives the same bits on either instruction set.
#pragma once

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !defined(TL_SCALAR)
#define TL_AVX2 1
#include <immintrin.h>
#elif defined(__aarch64__) && defined(__ARM_NEON) && !defined(TL_SCALAR)
#define TL_NEON 1
#include <arm_neon.h>
#endif
#if defined(TL_AVX2) || defined(TL_NEON)
#define TL_SIMD 1
#endif

namespace tl {

#if defined(TL_AVX2)
using V8 = __m256;
static inline V8 v8_zero() { return _mm256_setzero_ps(); }
static inline V8 v8_load(const float* p) { return _mm256_loadu_ps(p); }
static inline void v8_store(float* p, V8 v) { _mm256_storeu_ps(p, v); }
static inline V8 v8_add(V8 a, V8 b) { return _mm256_add_ps(a, b); }
static inline V8 v8_fma(V8 a, V8 b, V8 c) { return _mm256_fmadd_ps(a, b, c); }  // a * b + c, one rounding

// v, held in a register: where one loaded vector feeds several FMAs, the compiler would otherwise fold the load
// into each of them (a load per FMA, which the load ports cannot keep up with).
static inline V8 in_register(V8 v) {
    asm("" : "+v"(v));
    return v;
}

// ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7))
static inline float hsum(V8 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#elif defined(TL_NEON)
struct V8 {
    float32x4_t lo, hi;  // lanes 0-3, 4-7
};
static inline V8 v8_zero() { return {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}; }
static inline V8 v8_load(const float* p) { return {vld1q_f32(p), vld1q_f32(p + 4)}; }
static inline void v8_store(float* p, V8 v) {
    vst1q_f32(p, v.lo);
    vst1q_f32(p + 4, v.hi);
}
static inline V8 v8_add(V8 a, V8 b) { return {vaddq_f32(a.lo, b.lo), vaddq_f32(a.hi, b.hi)}; }
static inline V8 v8_fma(V8 a, V8 b, V8 c) { return {vfmaq_f32(c.lo, a.lo, b.lo), vfmaq_f32(c.hi, a.hi, b.hi)}; }
static inline V8 in_register(V8 v) {
    asm("" : "+w"(v.lo), "+w"(v.hi));
    return v;
}
static inline float hsum(V8 v) {  // AVX2's order
    const float32x4_t s = vaddq_f32(v.lo, v.hi);
    const float32x2_t t = vadd_f32(vget_low_f32(s), vget_high_f32(s));
    return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
}
#endif

#ifdef TL_SIMD
// The float matmul's one order of joining an output's four partial sums (qmatmul.cpp, tile.h).
static inline float join4(V8 p0, V8 p1, V8 p2, V8 p3) { return hsum(v8_add(v8_add(p0, p1), v8_add(p2, p3))); }
#endif

}  // namespace tl
