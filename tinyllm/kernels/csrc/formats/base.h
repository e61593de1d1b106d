// What a format's decode provides (Format<F>, specialised in the format's header) and the defaults for a format
// whose sub-blocks share no bytes: a group of one sub-block, no per-block scales to unpack. decode_group8 and
// decode_group are a format's own where group_subs > 1 (on NEON decode_group8 never is); else blocks.h decodes
// the group's one sub-block.
//   decode32_scalar(b, sub, out)    portable: sub-block `sub` of block b into out[32], the reference's operations
//   k_scales(b, ks)                 SIMD, where block_scales: the block's sub-block scales, unpacked once a block
//   decode32(b, sub, w, ks)         AVX2 / NEON: sub-block `sub` into four 8-lane vectors
//   decode_group8(b, g, ks, w)      AVX2 / NEON: group g of group_subs sub-blocks into 4 group_subs vectors
//   decode16<STORED>(b, sub, ks, w01, w23), decode_group<STORED>(b, g, ks, w)   AVX-512: sixteen lanes at a time
//   codes32(b, sub, w, s0, s1)      the 8-bit-activation kernel's packing (q8pack.cpp): sub-block `sub`'s integer
//                                   codes as eight little-endian words (word m: elements 4m..4m + 3, a byte each)
//                                   and a K format's two integer sub-block scales
//   scale_bf16_bits(b)              where scale_bf16: the block's scale D as bfloat16 bits, exact, for a scale
//                                   float16 cannot hold (q8pack.cpp packs it in d's place)
// Every path gives the same values, bit for bit (blocks.h says how). Beside them, constants: how the 8-bit kernel
// reads the codes (q8act.h's Packed), and the float kernels' choices for the format (qmatmul.cpp).
#pragma once
#include "bytes.h"

namespace tl {
namespace {  // internal linkage, as static functions: GCC inlines them as it did those

// Bits 0..3 of x as the lowest bit of bytes 0..3 (the four shifted copies do not overlap: no carries).
static inline uint32_t spread4(uint32_t x) { return ((x & 15) * 0x00204081u) & 0x01010101u; }

struct FormatBase {
    static constexpr int group_subs = 1;  // sub-blocks decoded together (sharing their code bytes)
    static constexpr bool block_scales = false;  // sub-block scales to unpack per block (k_scales)

    // A weight is D * (code - code_offset) (+ M), D and M the (sub-)block's scale and minimum (q8act.h).
    static constexpr int d_offset = 0;            // the block's fp16 d
    static constexpr bool has_min = false;        // an fp16 m (or dmin) at d_offset + 2
    static constexpr int code_offset = 0;         // subtracted from every code
    static constexpr int code_high_bits = 0;      // code bits above the low nibble
    static constexpr bool signed_codes = false;   // a signed byte a code instead of a nibble (and high bits)
    static constexpr bool scale_halves = false;   // a scale per 16 elements of a sub-block
    static constexpr bool scale_bf16 = false;     // D packed as bfloat16, scale_bf16_bits(b), not the fp16 d

    // The float kernels' choices (qmatmul.cpp), each the faster in paired runs per format (docs/benchmarks.md).
    static constexpr bool ahead_into_l2 = false;  // at one activation row, lines fetched ahead into L2, not L1
    static constexpr bool decode_in_tile = false; // AVX-512 tile: the next strip's decode among the FMAs
    static constexpr int tile_min_m = 7;          // AVX-512: the fewest activation rows the register tile takes
    static constexpr int rows_at_m1 = 4;          // AVX-512, one activation row: weight rows at once (4, 2 or 1)
};

}  // namespace
}  // namespace tl
