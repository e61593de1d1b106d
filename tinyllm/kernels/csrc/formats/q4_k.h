// Q4_K: 256 elements in 144 bytes (k_block.h).
#pragma once
#include "k_block.h"

namespace tl {
namespace {  // internal linkage, as static functions: GCC inlines them as it did those

template <> struct Format<Q4_K> : KBlock<false> {
    static constexpr bool ahead_into_l2 = true;  // at one activation row
    static constexpr bool decode_in_tile = true;  // decode_group's table: off the FMAs' ports

#if defined(TL_AVX2) && defined(__AVX512F__)
    // Sub-blocks 2g, 2g + 1 into w[0..3] as decode16 gives them, each byte loaded once. A sub-block's weights take
    // 16 values, dl * q - ml for q = 0..15, worked out once into a table that the codes index (vpermps reads an
    // index's low 4 bits: a byte's low nibble as it is, its high one shifted down): the same values as
    // decode16's, without a conversion and an FMA per 16 weights.
    template <bool STORED> static inline void decode_group(const uint8_t* b, int g, const float* ks, __m512* w) {
        const uint8_t* qs = b + 16 + g * 32;
        const __m512i q0 = bytes16(qs), q1 = bytes16(qs + 16);
        const __m512 q16 = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const __m512 t0 = _mm512_fmsub_ps(_mm512_set1_ps(ks[2 * g]), q16, _mm512_set1_ps(ks[8 + 2 * g]));
        const __m512 t1 = _mm512_fmsub_ps(_mm512_set1_ps(ks[2 * g + 1]), q16, _mm512_set1_ps(ks[9 + 2 * g]));
        w[0] = _mm512_permutexvar_ps(q0, t0);
        w[1] = _mm512_permutexvar_ps(q1, t0);
        w[2] = _mm512_permutexvar_ps(_mm512_srli_epi32(q0, 4), t1);
        w[3] = _mm512_permutexvar_ps(_mm512_srli_epi32(q1, 4), t1);
    }
#endif
};

}  // namespace
}  // namespace tl
