// Elements of the KV cache as the native decode step reads and writes them: float32, float16 or bfloat16 rows,
// or q8_0 (int8 values with a float16 scale per 32, cache/q8_kv.py). A stored float value is the float32 one
// rounded to nearest, ties to even, as torch rounds it when the module path writes the same storage; a q8_0 run
// of 32 is quantized as cache/q8_kv.py's quantize does, bit for bit. A read widens exactly. load8 widens eight
// elements into one vector (V8), load1 one element; store_row writes a row.
//
// Readers address a cache through KvPtr<T>: a plain pointer for the float types, a Q8Ptr for q8_0, which moves
// like a pointer over the int8 values and finds each value's scale from its distance to the cache's start.
#pragma once
#include "blocks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace tl {

enum KvType { KV_F32 = 0, KV_F16 = 1, KV_BF16 = 2, KV_Q8 = 3 };
constexpr int64_t Q8_BLOCK = 32;  // values per scale

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

static inline float load1(const float* p) { return *p; }
static inline float load1(const half_t* p) { return to_float(*p); }
static inline float load1(const bf16_t* p) { return to_float(*p); }

// Rows of n values (n a multiple of 32 for q8_0) written at element e of a cache (and its scales).
template <class T> static inline void store_row(const float* x, int64_t n, void* cache, void*, int64_t e) {
    T* out = static_cast<T*>(cache) + e;
    for (int64_t c = 0; c < n; ++c) store(x[c], out + c);
}

struct q8_t {};  // the q8_0 element type's tag

template <> inline void store_row<q8_t>(const float* x, int64_t n, void* cache, void* scales, int64_t e) {
    int8_t* q = static_cast<int8_t*>(cache) + e;
    half_t* d = static_cast<half_t*>(scales) + e / Q8_BLOCK;
    for (int64_t b = 0; b < n / Q8_BLOCK; ++b) {
        const float* xb = x + b * Q8_BLOCK;
        float amax = 0.0f;
        for (int64_t c = 0; c < Q8_BLOCK; ++c) amax = std::max(amax, std::fabs(xb[c]));
        store(amax / 127.0f, d + b);
        const float wide = to_float(d[b]);
        for (int64_t c = 0; c < Q8_BLOCK; ++c)
            q[b * Q8_BLOCK + c] = wide == 0.0f ? 0 : (int8_t)std::min(127.0f, std::max(-127.0f, std::nearbyint(xb[c] / wide)));
    }
}

struct Q8Ptr {
    const int8_t* q;      // the value this points at
    const int8_t* start;  // the cache's first value
    const half_t* d;      // the cache's first scale
    Q8Ptr operator+(int64_t n) const { return {q + n, start, d}; }
    float scale() const { return to_float(d[(size_t)(q - start) / Q8_BLOCK]); }
};

template <class T> struct KvPtrOf {
    using type = const T*;
};
template <> struct KvPtrOf<q8_t> {
    using type = Q8Ptr;
};
template <class T> using KvPtr = typename KvPtrOf<T>::type;

template <class T> static inline KvPtr<T> kv_rows(const void* cache, const void*) { return static_cast<const T*>(cache); }
template <> inline Q8Ptr kv_rows<q8_t>(const void* cache, const void* scales) {
    const int8_t* q = static_cast<const int8_t*>(cache);
    return {q, q, static_cast<const half_t*>(scales)};
}

// Bytes of one element, and the address a pointer reads (for prefetching).
template <class T> constexpr int64_t kv_bytes() { return sizeof(T); }
template <> constexpr int64_t kv_bytes<q8_t>() { return 1; }
template <class T> static inline const char* kv_addr(const T* p) { return reinterpret_cast<const char*>(p); }
static inline const char* kv_addr(Q8Ptr p) { return reinterpret_cast<const char*>(p.q); }
static inline float load1(Q8Ptr p) { return (float)*p.q * p.scale(); }

#ifdef TL_NEON
static inline V8 widen8(const int8_t* q, V8 s) {  // eight int8 values times their run's scale s
    const int16x8_t w = vmovl_s8(vld1_s8(q));
    return {vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(w))), s.lo), vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(w))), s.hi)};
}
#endif
#ifdef TL_AVX2
static inline __m256 widen8(const int8_t* q, __m256 s) {  // eight int8 values times their run's scale s
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)q))), s);
}
#endif
#ifdef TL_SIMD
static inline V8 load8(Q8Ptr p) { return widen8(p.q, v8_set1(p.scale())); }  // p 8-aligned within its run
#endif

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

#ifdef TL_SIMD
// A row's 64 values from p as eight vectors, load(i) the eight at p + i (i a multiple of 8 below 64): a q8_0
// row (p at the start of a run of 32) reads its two scales once. The same values as load8(p + i).
template <class P> struct Row64 {
    P p;
    V8 load(int64_t i) const { return load8(p + i); }
};
template <> struct Row64<Q8Ptr> {
    const int8_t* q;
    V8 s0, s1;
    explicit Row64(Q8Ptr p) : q(p.q), s0(v8_set1(p.scale())), s1(v8_set1((p + Q8_BLOCK).scale())) {}
    V8 load(int64_t i) const { return widen8(q + i, i < Q8_BLOCK ? s0 : s1); }
};
#endif

}  // namespace tl
