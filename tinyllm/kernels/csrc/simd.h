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
static inline V8 v8_fnma(V8 a, V8 b, V8 c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a * b, one rounding
static inline V8 v8_set1(float x) { return _mm256_set1_ps(x); }
static inline V8 v8_sub(V8 a, V8 b) { return _mm256_sub_ps(a, b); }
static inline V8 v8_mul(V8 a, V8 b) { return _mm256_mul_ps(a, b); }
static inline V8 v8_div(V8 a, V8 b) { return _mm256_div_ps(a, b); }
static inline V8 v8_max(V8 a, V8 b) { return _mm256_max_ps(a, b); }  // a > b ? a : b (b where either is NaN)
static inline V8 v8_min(V8 a, V8 b) { return _mm256_min_ps(a, b); }  // a < b ? a : b
static inline V8 v8_abs(V8 a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
static inline V8 v8_copysign(V8 mag, V8 sign) {  // mag >= 0
    return _mm256_or_ps(mag, _mm256_and_ps(_mm256_set1_ps(-0.0f), sign));
}
static inline V8 v8_round(V8 a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// 2^n for integral n in [-126, 127] (n as float)
static inline V8 v8_exp2i(V8 n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
// Per 128-bit half, as _mm256_hadd_ps: [a0 + a1, a2 + a3, b0 + b1, b2 + b3 | a4 + a5, a6 + a7, b4 + b5, b6 + b7]
static inline V8 v8_hadd(V8 a, V8 b) { return _mm256_hadd_ps(a, b); }
// [a0..3 + a4..7 | b0..3 + b4..7]
static inline V8 v8_fold(V8 a, V8 b) {
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

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
static inline V8 v8_fnma(V8 a, V8 b, V8 c) { return {vfmsq_f32(c.lo, a.lo, b.lo), vfmsq_f32(c.hi, a.hi, b.hi)}; }
static inline V8 v8_set1(float x) { return {vdupq_n_f32(x), vdupq_n_f32(x)}; }
static inline V8 v8_sub(V8 a, V8 b) { return {vsubq_f32(a.lo, b.lo), vsubq_f32(a.hi, b.hi)}; }
static inline V8 v8_mul(V8 a, V8 b) { return {vmulq_f32(a.lo, b.lo), vmulq_f32(a.hi, b.hi)}; }
static inline V8 v8_div(V8 a, V8 b) { return {vdivq_f32(a.lo, b.lo), vdivq_f32(a.hi, b.hi)}; }
static inline float32x4_t max4(float32x4_t a, float32x4_t b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
static inline float32x4_t min4(float32x4_t a, float32x4_t b) { return vbslq_f32(vcltq_f32(a, b), a, b); }
static inline V8 v8_max(V8 a, V8 b) { return {max4(a.lo, b.lo), max4(a.hi, b.hi)}; }  // AVX2's: b on a NaN
static inline V8 v8_min(V8 a, V8 b) { return {min4(a.lo, b.lo), min4(a.hi, b.hi)}; }
static inline V8 v8_abs(V8 a) { return {vabsq_f32(a.lo), vabsq_f32(a.hi)}; }
static inline float32x4_t copysign4(float32x4_t mag, float32x4_t sign) {
    return vbslq_f32(vdupq_n_u32(0x80000000u), sign, mag);
}
static inline V8 v8_copysign(V8 mag, V8 sign) { return {copysign4(mag.lo, sign.lo), copysign4(mag.hi, sign.hi)}; }
static inline V8 v8_round(V8 a) { return {vrndnq_f32(a.lo), vrndnq_f32(a.hi)}; }
static inline float32x4_t exp2i4(float32x4_t n) {
    return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23));
}
static inline V8 v8_exp2i(V8 n) { return {exp2i4(n.lo), exp2i4(n.hi)}; }
static inline V8 v8_hadd(V8 a, V8 b) { return {vpaddq_f32(a.lo, b.lo), vpaddq_f32(a.hi, b.hi)}; }
static inline V8 v8_fold(V8 a, V8 b) { return {vaddq_f32(a.lo, a.hi), vaddq_f32(b.lo, b.hi)}; }
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
