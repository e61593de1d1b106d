// What a format's decode provides (Format<F>, specialised in the format's header) and the defaults for a format
// whose sub-blocks share no bytes: a group of one sub-block, no per-block scales to unpack.
//   decode32_scalar(b, sub, out)    portable: sub-block `sub` of block b into out[32], the reference's operations
//   k_scales(b, ks)                 SIMD: the block's sub-block scales, unpacked once per block
//   decode32(b, sub, w, ks)         AVX2 / NEON: sub-block `sub` into four 8-lane vectors
//   decode_group8(b, g, ks, w)      AVX2 / NEON: group g of group_subs sub-blocks into 4 group_subs vectors
//   decode16<STORED>(b, sub, ks, w01, w23), decode_group<STORED>(b, g, ks, w)   AVX-512: sixteen lanes at a time
// Every path gives the same values, bit for bit (blocks.h says how).
#pragma once
#include "bytes.h"

namespace tl {

template <class Self> struct FormatBase {
    static constexpr int group_subs = 1;  // sub-blocks decoded together (sharing their code bytes)
#if defined(TL_AVX2) || defined(TL_NEON)
    static inline void k_scales(const uint8_t*, float*) {}
    static inline void decode_group8(const uint8_t* b, int g, const float* ks, V8* w) {
        for (int i = 0; i < Self::group_subs; ++i) Self::decode32(b, g * Self::group_subs + i, w + 4 * i, ks);
    }
#endif
#if defined(TL_AVX2) && defined(__AVX512F__)
    template <bool STORED> static inline void decode_group(const uint8_t* b, int g, const float* ks, __m512* w) {
        Self::template decode16<STORED>(b, g, ks, w[0], w[1]);
    }
#endif
};

}  // namespace tl
