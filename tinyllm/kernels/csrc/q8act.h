// The 8-bit-activation matmul (weights="native-int8"): the activations' quantization, and the packed weight
// layout its kernel (q8act.cpp) reads, written once at load by q8pack.cpp.
//
// Packed layout. Rows go in groups of 16 (the last group padded with zero rows), a group being its units in K
// order. A unit is one GGUF block of the 16 rows: 32 elements for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and MXFP4; 256 for
// Q4_K, Q5_K and Q6_K, as eight 32-element sub-blocks. A vector holds one entry per row of the group, row r at r.
// A unit is
//   d[16]       float16: the block's d (MXFP4: bfloat16, its E8M0 scale 2^(e - 128), which float16 cannot hold)
//   m[16]       float16, formats with a minimum only: Q4_1/Q5_1 the block's m; Q4_K/Q5_K its dmin negated
// then per sub-block (one for the 32-element formats), in K order:
//   s0[16]      K formats only, int8: Q4_K/Q5_K the sub-block's 6-bit scale; Q6_K the scale of elements 0..15
//   s1[16]      K formats only, int8: Q4_K/Q5_K the sub-block's 6-bit min; Q6_K the scale of elements 16..31
//   codes       element e = 4 j + t of row r (j = 0..7) at 4 r + t in a 64-byte vector of j, so that one 4-byte
//               broadcast of the activations meets 16 rows:
//               Q8_0: byte 64 j + 4 r + t, signed (512 bytes).
//               The others, unsigned: bits 0..3 in byte 64 (j % 4) + 4 r + t, its low nibble for j < 4 and its
//               high nibble for j >= 4 (256 bytes); then Q5_0/Q5_1/Q5_K/MXFP4 bit 4 at bit j of byte 256 + 4 r + t
//               (64 bytes), or Q6_K bits 4..5 at bits 2 (j % 4) .. 2 (j % 4) + 1 of byte 256 + 64 (j / 4) + 4 r + t
//               (128 bytes).
// A weight w = D * (code - offset) (+ M) where offset is 8 (Q4_0), 16 (Q5_0; MXFP4, its code its value v + 16),
// 32 (Q6_K) or 0, and D = d (M = m) for the 32-element formats; Q4_K/Q5_K D = d * s0, M = m * s1; Q6_K D = d * s0
// for elements 0..15 and d * s1 for 16..31. These products of a float16 (MXFP4: a power of two) and an integer of
// at most 8 bits are exact in float32: the kernel forms the float32 values the reference dequantization does.
// Bytes per 16 rows x 32 elements: Q4_0 288, Q4_1 320, Q5_0 352, Q5_1 384, Q8_0 544 (each the GGUF blocks'
// size); Q4_K 296, Q5_K 360, Q6_K 420 (the GGUF blocks': 288, 352, 420); MXFP4 352 (272: its values -12..12 are
// codes of five bits, as Q5_0's, v + 16).
#pragma once
#include "blocks.h"

#include <cstdint>

namespace tl {

constexpr int64_t GROUP = 16;  // weight rows per packed group

template <int F> struct Packed {
    static constexpr bool k = Traits<F>::block > 32;  // 256-element units, with integer sub-block scales
    static constexpr bool min = Format<F>::has_min;
    static constexpr bool halves = Format<F>::scale_halves;  // two scales per sub-block
    static constexpr bool sign = Format<F>::signed_codes;    // signed codes, a byte each
    static constexpr bool nibbles = !sign;
    static constexpr int high = Format<F>::code_high_bits;  // bits above the nibble
    static constexpr int offset = Format<F>::code_offset;
    static constexpr bool bf16 = Format<F>::scale_bf16;  // d as bfloat16, not float16
    static constexpr int subs = k ? 8 : 1;                                 // sub-blocks per unit
    static constexpr int64_t head = min ? 64 : 32;                         // float16 d (and m) opening a unit
    static constexpr int64_t ints = k ? 32 : 0;                            // int8 scales opening a sub-block
    static constexpr int64_t code_bytes = nibbles ? 256 + 64 * high : 512;  // of one sub-block
    static constexpr int64_t sub_bytes = ints + code_bytes;
    static constexpr int64_t bytes = head + subs * sub_bytes;                       // one unit
    static constexpr int64_t group_bytes(int64_t kb) { return kb / subs * bytes; }  // kb: 32-element blocks of K
    // Where the code bits above the nibble of j (0..7) are: the offset in a sub-block's codes of the 64-byte
    // vector that holds them, and their lowest bit in its bytes.
    static constexpr int plane(int j) { return 256 + 64 * (j / (8 / (high ? high : 1))); }
    static constexpr int bit(int j) { return high * (j % (8 / (high ? high : 1))); }
    // Within a group: the unit of 32-element block b, and b's sub-block (its int8 scales, then its codes).
    template <class T> static T* unit_of(T* group, int64_t b) { return group + b / subs * bytes; }
    template <class T> static T* sub_of(T* group, int64_t b) {
        return unit_of(group, b) + head + b % subs * sub_bytes;
    }
};

// An activation matrix quantized per 32 elements, block-major: block b of row r at b * m + r, so the rows of a
// kernel tile sit side by side at each block (one pointer and constant offsets, not one pointer a row).
// With limbs L > 1 (24-bit activations: L = 3) each input row i is L rows, i * L + l for limb l: limb 0
// quantizes the row, limb l the remainder the limbs before it left (x - sum of their q * d, each step one
// rounding: fma), so that the row is the sum of its limbs' q * d up to 2^-8L of its block's max, and a product
// with the weight the sum of the limbs' products.
struct Q8Act {
    const int8_t* q;      // [K / 32, M, 32]
    const float* d;       // [K / 32, M]
    const int32_t* sum;   // [K / 32, M]: sum of the block's q
    const int32_t* half;  // [K / 32, M]: sum of its first 16 q (Q6_K's two scales)
    const float* s;       // [K / 32, M]: d * sum, as float32
    int64_t kb, m;        // blocks per row, rows (limbs included)
    int64_t limbs;        // rows per input row
};

// x [m, k] quantized into buffers of the calling thread (valid until its next call), rows split over threads,
// each row as `limbs` rows (above).
Q8Act q8_quantize(const float* x, int64_t m, int64_t k, int threads, int64_t limbs = 1);

// y [a.m / a.limbs, n] = the quantized activations @ the packed weight^T, an input row's limbs summed last
// first (the smallest first). Returns 0, or -1 for a format without it.
int q8_matmul(int fmt, const Q8Act& a, const uint8_t* packed, int64_t n, float* y, int threads);

}  // namespace tl
