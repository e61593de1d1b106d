// Decoding one 32-element sub-block of each GGUF format into float32, bit-identical to the reference: the
// scalar path does the reference's operations in its order (built with -ffp-contract=off so nothing is fused).
// The AVX2 path fuses d * q + m into one FMA only where d * q is exact in float32, so one rounding of the exact
// sum equals the reference's two: q has at most 5 bits and d is an fp16 (11 significant bits), or for Q4_K/Q5_K
// d * scale has 11 + 6 bits; 16 or 22 bits fit float32's 24.
// The NEON path decodes to the same values (a fused d * q + m where d * q is exact, as on AVX2).
#pragma once
#include <cstdint>
#include <cstring>
#include <cmath>

#include "simd.h"

namespace tl {

// GGML type ids, as passed from Python (FORMATS[...].ggml_type).
enum Fmt { Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14 };

template <int F> struct Traits;
template <> struct Traits<Q4_0> { static constexpr int block = 32, bytes = 18; };
template <> struct Traits<Q4_1> { static constexpr int block = 32, bytes = 20; };
template <> struct Traits<Q5_0> { static constexpr int block = 32, bytes = 22; };
template <> struct Traits<Q5_1> { static constexpr int block = 32, bytes = 24; };
template <> struct Traits<Q8_0> { static constexpr int block = 32, bytes = 34; };
template <> struct Traits<Q4_K> { static constexpr int block = 256, bytes = 144; };
template <> struct Traits<Q5_K> { static constexpr int block = 256, bytes = 176; };
template <> struct Traits<Q6_K> { static constexpr int block = 256, bytes = 210; };

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

// Q4_K / Q5_K: the 6-bit scale and min of sub-block s (0..7) from the 12 packed bytes.
static inline void k_scale_min(const uint8_t* s, int sub, int* sc, int* mn) {
    if (sub < 4) {
        *sc = s[sub] & 63;
        *mn = s[sub + 4] & 63;
    } else {
        *sc = (s[sub + 4] & 0x0F) | ((s[sub - 4] >> 6) << 4);
        *mn = (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
    }
}

// Portable decode of sub-block `sub` (32 elements) of block `b` into out[32].
template <int F> static inline void decode32_scalar(const uint8_t* b, int sub, float* out) {
    if constexpr (F == Q4_0 || F == Q4_1 || F == Q5_0 || F == Q5_1) {
        constexpr bool has_min = F == Q4_1 || F == Q5_1, five = F == Q5_0 || F == Q5_1;
        const float d = f16(b), m = has_min ? f16(b + 2) : 0.0f;
        const int qh_off = has_min ? 4 : 2, qs_off = qh_off + (five ? 4 : 0);
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
    } else if constexpr (F == Q8_0) {
        const float d = f16(b);
        for (int l = 0; l < 32; ++l) out[l] = (float)(int8_t)b[2 + l] * d;
    } else if constexpr (F == Q4_K || F == Q5_K) {
        int sc, mn;
        k_scale_min(b + 4, sub, &sc, &mn);
        const float dl = f16(b) * (float)sc, ml = f16(b + 2) * (float)mn;
        const uint8_t* qs = b + (F == Q4_K ? 16 : 48) + (sub / 2) * 32;
        const int shift = 4 * (sub & 1);
        for (int l = 0; l < 32; ++l) {
            int q = (qs[l] >> shift) & 15;
            if (F == Q5_K) q |= ((b[16 + l] >> sub) & 1) << 4;
            out[l] = dl * (float)q - ml;
        }
    } else {  // Q6_K
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
}

// Sub-blocks that share their code bytes, decoded together by decode_group: a Q4_K/Q5_K pair (low and high
// nibbles of the same 32 bytes), a Q6_K quarter (four sub-blocks over 64 low and 32 high bytes), else one.
template <int F> constexpr int group_subs() { return F == Q4_K || F == Q5_K ? 2 : F == Q6_K ? 4 : 1; }

#ifdef TL_AVX2
static inline __m256i bytes8(const uint8_t* p) {  // 8 bytes -> 8 x int32, zero-extended
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)p));
}

// Bit (8g + i) of qh, for i = 0..7, as 0 or 16 in lane i.
static inline __m256i high_bits(__m256i qh, int g) {
    const __m256i mask = _mm256_sllv_epi32(_mm256_set1_epi32(1 << (8 * g)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_and_si256(_mm256_cmpeq_epi32(_mm256_and_si256(qh, mask), mask), _mm256_set1_epi32(16));
}

// Q4_K / Q5_K: the eight 6-bit scales (sc) and mins (mn) of k_scale_min, a byte each, from the 12 packed bytes
// s, four at a time in a 32-bit word (scalar integer ops, off the vector ports the decode keeps busy): with a, b,
// c the words at s, s + 4, s + 8, t < 4: sc = a & 63, mn = b & 63; t >= 4: sc = c & 15 | (a >> 6) << 4, mn = c >> 4
// | (b >> 6) << 4, per byte.
static inline void k_scale_min8(const uint8_t* s, uint64_t* sc, uint64_t* mn) {
    const uint32_t a = u32(s), b = u32(s + 4), c = u32(s + 8), six = 0x3F3F3F3Fu, four = 0x0F0F0F0Fu, top = 0x30303030u;
    *sc = (a & six) | (uint64_t)((c & four) | ((a >> 2) & top)) << 32;
    *mn = (b & six) | (uint64_t)(((c >> 4) & four) | ((b >> 2) & top)) << 32;
}

// A K block's sub-block scales as the reference computes them (an fp16 times a 6- or 8-bit integer, exact in
// float32): Q4_K/Q5_K: ks[t] = d * sc_t, ks[8 + t] = dmin * mn_t for t = 0..7 (k_scale_min8); Q6_K: ks[i] = d *
// scale_i for its sixteen scales (sub-block t uses 2t and 2t + 1). Other formats have none. One call per block
// instead of unpacking per sub-block; on AVX-512 one 16-lane conversion and product.
template <int F> static inline void k_scales(const uint8_t* b, float* ks) {
#ifdef __AVX512F__
    if constexpr (F == Q6_K) {
        const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(b + 192))));
        _mm512_storeu_ps(ks, _mm512_mul_ps(_mm512_set1_ps(f16(b + 208)), q));
    } else if constexpr (F == Q4_K || F == Q5_K) {
        uint64_t sc, mn;
        k_scale_min8(b + 4, &sc, &mn);
        const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_set_epi64x((int64_t)mn, (int64_t)sc)));
        const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)u32(b)));  // d, dmin
        const __m512 d = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                               _mm512_castps128_ps512(dm));
        _mm512_storeu_ps(ks, _mm512_mul_ps(d, q));
    }
#else
    if constexpr (F == Q6_K) {
        const __m128i raw = _mm_loadu_si128((const __m128i*)(b + 192));
        const __m256 d = _mm256_set1_ps(f16(b + 208));
        _mm256_storeu_ps(ks, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw))));
        _mm256_storeu_ps(ks + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(raw, 8)))));
    } else if constexpr (F == Q4_K || F == Q5_K) {
        uint64_t sc, mn;
        k_scale_min8(b + 4, &sc, &mn);
        const __m256 q0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((int64_t)sc)));
        const __m256 q1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((int64_t)mn)));
        _mm256_storeu_ps(ks, _mm256_mul_ps(_mm256_set1_ps(f16(b)), q0));
        _mm256_storeu_ps(ks + 8, _mm256_mul_ps(_mm256_set1_ps(f16(b + 2)), q1));
    }
#endif
}

// AVX2 decode of sub-block `sub` into w[0..3], w[i] holding elements 8i..8i+7; ks: the block's k_scales.
template <int F> static inline void decode32(const uint8_t* b, int sub, __m256* w, const float* ks) {
    const __m256i low4 = _mm256_set1_epi32(15);
    if constexpr (F == Q4_0 || F == Q4_1 || F == Q5_0 || F == Q5_1) {
        constexpr bool has_min = F == Q4_1 || F == Q5_1, five = F == Q5_0 || F == Q5_1;
        // d (and m, the next two bytes) converted together: one conversion, then broadcasts.
        const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(has_min ? (int)u32(b) : (int)*(const uint16_t*)b));
        const __m256 d = _mm256_broadcastss_ps(dm);
        const int qh_off = has_min ? 4 : 2, qs_off = qh_off + (five ? 4 : 0);
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
    } else if constexpr (F == Q8_0) {
        const __m256 d = _mm256_set1_ps(f16(b));
        for (int g = 0; g < 4; ++g)
            w[g] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(b + 2 + 8 * g)))), d);
    } else if constexpr (F == Q4_K || F == Q5_K) {
        const __m256 dl = _mm256_set1_ps(ks[sub]), nml = _mm256_set1_ps(-ks[8 + sub]);
        const uint8_t* qs = b + (F == Q4_K ? 16 : 48) + (sub / 2) * 32;
        const __m128i shift = _mm_cvtsi32_si128(4 * (sub & 1));
        for (int g = 0; g < 4; ++g) {
            __m256i q = _mm256_and_si256(_mm256_srl_epi32(bytes8(qs + 8 * g), shift), low4);
            if constexpr (F == Q5_K) {
                const __m256i h = _mm256_srl_epi32(bytes8(b + 16 + 8 * g), _mm_cvtsi32_si128(sub));
                q = _mm256_or_si256(q, _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(1)), 4));
            }
            w[g] = _mm256_fmadd_ps(dl, _mm256_cvtepi32_ps(q), nml);  // dl * q exact: 22 bits
        }
    } else {  // Q6_K
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
}

// decode32 of sub-blocks g * S .. g * S + S - 1 (S = group_subs) into w[4 S], sub-block g * S + i at w[4 i..]: the
// same values, a Q4_K pair's or Q6_K quarter's code bytes loaded once.
template <int F> static inline void decode_group8(const uint8_t* b, int g, const float* ks, __m256* w) {
    const __m256i low4 = _mm256_set1_epi32(15);
    if constexpr (F == Q4_K || F == Q5_K) {
        const uint8_t* qs = b + (F == Q4_K ? 16 : 48) + g * 32;
        const __m128i s0 = _mm_cvtsi32_si128(2 * g), s1 = _mm_cvtsi32_si128(2 * g + 1);
        const __m256i sixteen = _mm256_set1_epi32(16);
        for (int v = 0; v < 4; ++v) {
            const __m256i q = bytes8(qs + 8 * v);
            __m256i q0 = _mm256_and_si256(q, low4), q1 = _mm256_srli_epi32(q, 4);
            if constexpr (F == Q5_K) {  // bit s of byte l of qh: element l's fifth bit in sub-block s
                const __m256i h = _mm256_slli_epi32(bytes8(b + 16 + 8 * v), 4);
                q0 = _mm256_or_si256(q0, _mm256_and_si256(_mm256_srl_epi32(h, s0), sixteen));
                q1 = _mm256_or_si256(q1, _mm256_and_si256(_mm256_srl_epi32(h, s1), sixteen));
            }
            w[v] = _mm256_fmadd_ps(_mm256_set1_ps(ks[2 * g]), _mm256_cvtepi32_ps(q0),
                                   _mm256_set1_ps(-ks[8 + 2 * g]));  // dl * q exact: 22 bits
            w[4 + v] = _mm256_fmadd_ps(_mm256_set1_ps(ks[2 * g + 1]), _mm256_cvtepi32_ps(q1),
                                       _mm256_set1_ps(-ks[8 + 2 * g + 1]));
        }
    } else if constexpr (F == Q6_K) {
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
    } else {
        for (int i = 0; i < group_subs<F>(); ++i) decode32<F>(b, g * group_subs<F>() + i, w + 4 * i, ks);
    }
}
#endif

#if defined(TL_AVX2) && defined(__AVX512F__)
// p, hidden from the optimizer, so that values read through it are loaded from memory. A block's scales kept
// in registers cost a shuffle and a register broadcast each (valignd or vmovshdup, vbroadcastss) on the ports
// the decode's own shuffles use; broadcast from memory, each is a load. One row, paired runs against registers:
// Q4_1 3-8%, Q4_K 2-7%, Q5_K 4-5%, Q6_K 0-13% less time, the same bits (Q8_0's one scale: 5% more, so not there).
template <int N> static inline const float* from_memory(const float* p) {
    asm volatile("" : "+r"(p) : "m"(*(const float(*)[N])p));  // the N floats at p are read (so stored first)
    return p;
}

// Lanes 8-15 of v (AVX512F alone, no DQ).
static inline __m256 high256(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

// 16 bytes zero-extended into sixteen 32-bit lanes.
static inline __m512i bytes16(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)p)); }

// decode32 sixteen lanes at a time: w01 holds w[0] and w[1] (elements 0-15), w23 w[2] and w[3] (16-31), each
// lane the same operations as there, so the same values. ks: the block's k_scales. STORED: a block of 32's d and
// m are stored and broadcast from memory (from_memory), the cheaper for one row; else broadcast in registers,
// for kernels that keep many accumulators in arrays: from_memory's asm had the compiler store every one of them
// to the stack on each iteration.
template <int F, bool STORED = true>
static inline void decode16(const uint8_t* b, int sub, const float* ks, __m512& w01, __m512& w23) {
    const __m512i low4 = _mm512_set1_epi32(15);
    if constexpr (F == Q4_0 || F == Q4_1 || F == Q5_0 || F == Q5_1) {
        constexpr bool has_min = F == Q4_1 || F == Q5_1, five = F == Q5_0 || F == Q5_1;
        alignas(16) float dm[4];  // d (and m) converted together
        _mm_store_ps(dm, _mm_cvtph_ps(_mm_cvtsi32_si128(has_min ? (int)u32(b) : (int)*(const uint16_t*)b)));
        const float* dmp = STORED ? from_memory<4>(dm) : dm;
        const __m512 d = _mm512_set1_ps(dmp[0]);
        const int qh_off = has_min ? 4 : 2, qs_off = qh_off + (five ? 4 : 0);
        const __m512i q = bytes16(b + qs_off);
        const __m512i hi4 = _mm512_srli_epi32(q, 4);
        const __m512 q16 = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        // Q4_0, Q4_1, Q5_0: a block's weights take 16 or 32 values, one per q. Each is worked out once, by the
        // operation decode32 applies to every element (d * (q - offset), or d * q + m in one rounding), into a
        // table the q's then index (vpermps): the same values with fewer vector ops, measured per 32 weights
        // on one row, Q4_0 -22%, Q4_1 -3%, Q5_0 -9%. Q5_1's two tables, each with its own FMA, were 10% slower.
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
    } else if constexpr (F == Q8_0) {
        const __m512 d = _mm512_set1_ps(f16(b));
        w01 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(b + 2)))), d);
        w23 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(b + 18)))), d);
    } else if constexpr (F == Q4_K || F == Q5_K) {
        const __m512 dl = _mm512_set1_ps(ks[sub]), nml = _mm512_set1_ps(-ks[8 + sub]);
        const uint8_t* qs = b + (F == Q4_K ? 16 : 48) + (sub / 2) * 32;
        const __m128i shift = _mm_cvtsi32_si128(4 * (sub & 1));
        __m512i q0 = _mm512_and_si512(_mm512_srl_epi32(bytes16(qs), shift), low4);
        __m512i q1 = _mm512_and_si512(_mm512_srl_epi32(bytes16(qs + 16), shift), low4);
        if constexpr (F == Q5_K) {
            const __m128i hs = _mm_cvtsi32_si128(sub);
            const __m512i one = _mm512_set1_epi32(1);
            q0 = _mm512_or_si512(q0, _mm512_slli_epi32(_mm512_and_si512(_mm512_srl_epi32(bytes16(b + 16), hs), one), 4));
            q1 = _mm512_or_si512(q1, _mm512_slli_epi32(_mm512_and_si512(_mm512_srl_epi32(bytes16(b + 32), hs), one), 4));
        }
        w01 = _mm512_fmadd_ps(dl, _mm512_cvtepi32_ps(q0), nml);  // dl * q exact: 22 bits
        w23 = _mm512_fmadd_ps(dl, _mm512_cvtepi32_ps(q1), nml);
    } else {  // Q6_K
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
}


// Sub-blocks g * S .. g * S + S - 1 (S = group_subs) into w[2 S]: w[2 i], w[2 i + 1] as decode16 gives sub-block
// g * S + i, the same values with each byte loaded once.
template <int F, bool STORED = true> static inline void decode_group(const uint8_t* b, int g, const float* ks, __m512* w) {
    const __m512i low4 = _mm512_set1_epi32(15);
    if constexpr (F == Q4_K) {
        // A sub-block's weights take 16 values, dl * q - ml for q = 0..15, worked out once into a table that the
        // codes index (vpermps reads an index's low 4 bits: a byte's low nibble as it is, its high one shifted
        // down): the same values as decode16's, without a conversion and an FMA per 16 weights.
        const uint8_t* qs = b + 16 + g * 32;
        const __m512i q0 = bytes16(qs), q1 = bytes16(qs + 16);
        const __m512 q16 = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const __m512 t0 = _mm512_fmsub_ps(_mm512_set1_ps(ks[2 * g]), q16, _mm512_set1_ps(ks[8 + 2 * g]));
        const __m512 t1 = _mm512_fmsub_ps(_mm512_set1_ps(ks[2 * g + 1]), q16, _mm512_set1_ps(ks[9 + 2 * g]));
        w[0] = _mm512_permutexvar_ps(q0, t0);
        w[1] = _mm512_permutexvar_ps(q1, t0);
        w[2] = _mm512_permutexvar_ps(_mm512_srli_epi32(q0, 4), t1);
        w[3] = _mm512_permutexvar_ps(_mm512_srli_epi32(q1, 4), t1);
    } else if constexpr (F == Q5_K) {
        const uint8_t* qs = b + 48 + g * 32;
        const __m512i q0 = bytes16(qs), q1 = bytes16(qs + 16);
        __m512i c[4] = {_mm512_and_si512(q0, low4), _mm512_and_si512(q1, low4), _mm512_srli_epi32(q0, 4),
                        _mm512_srli_epi32(q1, 4)};
        {  // bit s of byte l of qh: element l's fifth bit in sub-block s, tested into a mask that ors in 16
            const __m512i h0 = bytes16(b + 16), h1 = bytes16(b + 32), sixteen = _mm512_set1_epi32(16);
            for (int i = 0; i < 4; ++i) {
                const __mmask16 fifth = _mm512_test_epi32_mask(i % 2 ? h1 : h0, _mm512_set1_epi32(1 << (2 * g + i / 2)));
                c[i] = _mm512_mask_or_epi32(c[i], fifth, c[i], sixteen);
            }
        }
        for (int i = 0; i < 4; ++i) {
            const int sub = 2 * g + i / 2;  // dl * q exact: 22 bits
            // dl * q - ml in one rounding, as fma(dl, q, -ml): ml broadcast straight from ks, no negation
            w[i] = _mm512_fmsub_ps(_mm512_set1_ps(ks[sub]), _mm512_cvtepi32_ps(c[i]), _mm512_set1_ps(ks[8 + sub]));
        }
    } else if constexpr (F == Q6_K) {
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
    } else {
        decode16<F, STORED>(b, g, ks, w[0], w[1]);
    }
}
#endif

#ifdef TL_NEON
// The K formats' sub-block scales, as k_scales computes them on AVX2 (the same exact products).
template <int F> static inline void k_scales(const uint8_t* b, float* ks) {
    if constexpr (F == Q6_K) {
        const float d = f16(b + 208);
        for (int i = 0; i < 16; ++i) ks[i] = d * (float)(int8_t)b[192 + i];
    } else if constexpr (F == Q4_K || F == Q5_K) {
        const float d = f16(b), dmin = f16(b + 2);
        for (int t = 0; t < 8; ++t) {
            int sc, mn;
            k_scale_min(b + 4, t, &sc, &mn);
            ks[t] = d * (float)sc;
            ks[8 + t] = dmin * (float)mn;
        }
    }
}

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

// NEON decode of sub-block `sub` into w[0..3], w[i] holding elements 8i..8i+7; ks: the block's k_scales.
template <int F> static inline void decode32(const uint8_t* b, int sub, V8* w, const float* ks) {
    float32x4_t q[8];  // elements 4i..4i+3, as float
    if constexpr (F == Q4_0 || F == Q4_1 || F == Q5_0 || F == Q5_1) {
        constexpr bool has_min = F == Q4_1 || F == Q5_1, five = F == Q5_0 || F == Q5_1;
        const int qh_off = has_min ? 4 : 2, qs_off = qh_off + (five ? 4 : 0);
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
    } else if constexpr (F == Q8_0) {
        widen16(vld1q_s8((const int8_t*)(b + 2)), q);
        widen16(vld1q_s8((const int8_t*)(b + 18)), q + 4);
        const float32x4_t d = vdupq_n_f32(f16(b));
        for (int i = 0; i < 8; ++i) q[i] = vmulq_f32(q[i], d);
    } else if constexpr (F == Q4_K || F == Q5_K) {
        const uint8_t* qs = b + (F == Q4_K ? 16 : 48) + (sub / 2) * 32;
        for (int h = 0; h < 2; ++h) {
            const uint8x16_t v = vld1q_u8(qs + 16 * h);
            uint8x16_t c = (sub & 1) ? vshrq_n_u8(v, 4) : vandq_u8(v, vdupq_n_u8(15));
            if constexpr (F == Q5_K)  // bit `sub` of byte l of qh: element l's fifth bit
                c = vorrq_u8(c, vandq_u8(vtstq_u8(vld1q_u8(b + 16 + 16 * h), vdupq_n_u8((uint8_t)(1 << sub))), vdupq_n_u8(16)));
            widen16(c, q + 4 * h);
        }
        const float32x4_t dl = vdupq_n_f32(ks[sub]), nml = vdupq_n_f32(-ks[8 + sub]);
        for (int i = 0; i < 8; ++i) q[i] = vfmaq_f32(nml, dl, q[i]);  // dl * q exact: 22 bits
    } else {  // Q6_K
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
    }
    for (int g = 0; g < 4; ++g) w[g] = {q[2 * g], q[2 * g + 1]};
}

template <int F> static inline void decode_group8(const uint8_t* b, int g, const float* ks, V8* w) {
    for (int i = 0; i < group_subs<F>(); ++i) decode32<F>(b, g * group_subs<F>() + i, w + 4 * i, ks);
}
#endif

}  // namespace tl
