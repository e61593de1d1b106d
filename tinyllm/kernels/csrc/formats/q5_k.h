// Q5_K: 256 elements in 176 bytes (k_block.h).
#pragma once
#include "k_block.h"

namespace tl {
namespace {  // internal linkage, as static functions: GCC inlines them as it did those

// Its decode converts and scales on the FMAs' ports: not in the tile (decode_in_tile false).
template <> struct Format<Q5_K> : KBlock<true> {
#if defined(TL_AVX2) && defined(__AVX512F__)
    // Sub-blocks 2g, 2g + 1 into w[0..3] as decode16 gives them, each byte loaded once.
    template <bool STORED> static inline void decode_group(const uint8_t* b, int g, const float* ks, __m512* w) {
        const __m512i low4 = _mm512_set1_epi32(15);
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
    }
#endif
};

}  // namespace
}  // namespace tl
