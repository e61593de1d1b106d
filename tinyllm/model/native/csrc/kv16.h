// AVX-512's 16-lane vectors for attention's reads of the KV cache, each lane doing what a lane of the 8-lane
// path (V8) does, in the same order: a 16-lane vector holds two 8-lane vectors side by side (two keys' same 8
// columns for the scores, 16 columns of a value row for the weighted values), so the results are the AVX2 and
// NEON builds' bits with half the instructions.
#pragma once
#include "kv.h"

#if defined(TL_AVX2) && defined(__AVX512F__) && defined(__AVX512DQ__)
#define TL_V16 1

namespace tl {

using V16 = __m512;

static inline V16 in_register(V16 v) {  // as in_register(V8): one load feeding several FMAs stays one load
    asm("" : "+v"(v));
    return v;
}

static inline V16 join8(__m256 lo, __m256 hi) { return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1); }

// The 8 values at a in the low half, those at b in the high half (each as load8 widens them).
template <class P> static inline V16 load8x2(P a, P b) { return join8(load8(a), load8(b)); }

// Values i..i + 15 of a row of 64 (i a multiple of 16): the same values as Row64's load(i) and load(i + 8).
template <class P> static inline V16 load16(const Row64<P>& r, int64_t i) { return join8(r.load(i), r.load(i + 8)); }
template <> inline V16 load16(const Row64<const float*>& r, int64_t i) { return _mm512_loadu_ps(r.p + i); }
template <> inline V16 load16(const Row64<const half_t*>& r, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(r.p + i)));
}
template <> inline V16 load16(const Row64<const bf16_t*>& r, int64_t i) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(r.p + i))), 16));
}

// v8_hadd in each half: [a1 + a0, a3 + a2, b1 + b0, b3 + b2] per 128-bit quarter, as _mm256_hadd_ps adds them.
static inline V16 hadd16(V16 a, V16 b) {
    return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)), _mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
}

// v8_fold of the two halves u0 (low) and u1 (high): [u0.q0 + u0.q1 | u1.q0 + u1.q1] (q: 128-bit quarters).
static inline __m256 fold16(V16 u) {
    const V16 lo = _mm512_shuffle_f32x4(u, u, _MM_SHUFFLE(2, 0, 2, 0)), hi = _mm512_shuffle_f32x4(u, u, _MM_SHUFFLE(3, 1, 3, 1));
    return _mm512_castps512_ps256(_mm512_add_ps(lo, hi));
}

}  // namespace tl
#endif
