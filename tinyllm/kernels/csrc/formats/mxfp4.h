// MXFP4: 32 elements in 17 bytes: an E8M0 scale byte e, then 16 bytes of 4-bit E2M1 codes, element l < 16 in
// byte 1 + l's low nibble, 16 + l in its high one. A weight is 2^(e - 128) * v[q], v the sixteen E2M1 values
// doubled (integers -12..12) and the scale halved to match, as ggml does. Each weight is a power of two times an
// integer of at most 4 significant bits: exact in float32 however it is formed, so every path gives the same bits.
#pragma once
#include "base.h"

namespace tl {
namespace {  // internal linkage, as static functions: GCC inlines them as it did those

constexpr int8_t MXFP4_VALUES[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128) as float32 bits: e = 0 and 1 are subnormals, the others a bare exponent e - 1.
static inline uint32_t e8m0_half_bits(uint8_t e) { return e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23; }

static inline float e8m0_half(uint8_t e) {
    const uint32_t bits = e8m0_half_bits(e);
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

template <> struct Format<MXFP4> : FormatBase {
    // 8-bit kernel: the codes as v + 16 (4..28, five bits, Q5_0's packing); its scale as bfloat16, the top half of
    // the float32 above (its low half is zero), which float16 could not hold.
    static constexpr int code_offset = 16, code_high_bits = 1;
    static constexpr bool scale_bf16 = true;
    static inline uint16_t scale_bf16_bits(const uint8_t* b) { return (uint16_t)(e8m0_half_bits(b[0]) >> 16); }
    // A table decode, as Q4_0's: shuffles and integer operations, off the FMAs' ports, so taken into the tile as
    // Q4_0's is (Q4_0's measurement; not yet paired-run for this format).
    static constexpr bool decode_in_tile = true;

    static inline void codes32(const uint8_t* b, int, uint32_t* w, int* s0, int* s1) {
        *s0 = *s1 = 0;
        const uint8_t* qs = b + 1;
        for (int m = 0; m < 4; ++m) {
            w[m] = w[m + 4] = 0;
            for (int t = 0; t < 4; ++t) {
                const uint8_t q = qs[4 * m + t];
                w[m] |= (uint32_t)(MXFP4_VALUES[q & 15] + 16) << (8 * t);
                w[m + 4] |= (uint32_t)(MXFP4_VALUES[q >> 4] + 16) << (8 * t);
            }
        }
    }

    static inline void decode32_scalar(const uint8_t* b, int, float* out) {
        const float d = e8m0_half(b[0]);
        for (int l = 0; l < 16; ++l) {
            out[l] = d * (float)MXFP4_VALUES[b[1 + l] & 15];
            out[l + 16] = d * (float)MXFP4_VALUES[b[1 + l] >> 4];
        }
    }

#ifdef TL_AVX2
    // Two tables of eight, d * v[0..7] and d * v[8..15], each indexed by q's low three bits (vpermps), the one
    // taken chosen by q's bit 3 moved to the sign bit (vblendvps).
    static inline void decode32(const uint8_t* b, int, __m256* w, const float*) {
        const __m256 d = _mm256_set1_ps(e8m0_half(b[0]));
        const __m256 lo8 = _mm256_mul_ps(d, _mm256_setr_ps(0, 1, 2, 3, 4, 6, 8, 12));
        const __m256 hi8 = _mm256_mul_ps(d, _mm256_setr_ps(0, -1, -2, -3, -4, -6, -8, -12));
        const __m256i a = bytes8(b + 1), c = bytes8(b + 9), low4 = _mm256_set1_epi32(15);
        const __m256i q[4] = {_mm256_and_si256(a, low4), _mm256_and_si256(c, low4), _mm256_srli_epi32(a, 4),
                              _mm256_srli_epi32(c, 4)};
        for (int g = 0; g < 4; ++g) {
            const __m256 pick = _mm256_castsi256_ps(_mm256_slli_epi32(q[g], 28));
            w[g] = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo8, q[g]), _mm256_permutevar8x32_ps(hi8, q[g]), pick);
        }
    }
#endif

#if defined(TL_AVX2) && defined(__AVX512F__)
    // One table of sixteen, d * v, indexed by the nibbles (vpermps reads an index's low four bits). One scale:
    // kept in a register whatever STORED says, as Q8_0's.
    template <bool STORED> static inline void decode16(const uint8_t* b, int, const float*, __m512& w01, __m512& w23) {
        const __m512 table = _mm512_mul_ps(_mm512_set1_ps(e8m0_half(b[0])),
                                           _mm512_setr_ps(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
        const __m512i q = bytes16(b + 1);
        w01 = _mm512_permutexvar_ps(q, table);
        w23 = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table);
    }
#endif

#ifdef TL_NEON
    static inline void decode32(const uint8_t* b, int, V8* w, const float*) {
        float32x4_t q[8];  // elements 4i..4i+3, as float
        const int8x16_t values = vld1q_s8(MXFP4_VALUES);
        const uint8x16_t qs = vld1q_u8(b + 1);
        widen16(vqtbl1q_s8(values, vandq_u8(qs, vdupq_n_u8(15))), q);
        widen16(vqtbl1q_s8(values, vshrq_n_u8(qs, 4)), q + 4);
        const float32x4_t d = vdupq_n_f32(e8m0_half(b[0]));
        for (int i = 0; i < 8; ++i) q[i] = vmulq_f32(d, q[i]);
        for (int g = 0; g < 4; ++g) w[g] = {q[2 * g], q[2 * g + 1]};
    }
#endif
};

}  // namespace
}  // namespace tl
