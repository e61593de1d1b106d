// The 8-bit-activation matmul (weights="native-int8"): the activations' quantization, and the packed weight
// layout its kernel (q8act.cpp) reads, written once at load by q8pack.cpp.
//
// Packed layout. Rows go in groups of 16 (the last group padded with zero rows), and each group has one
// record per 32 elements of K (a 32-element sub-block for Q4_K, Q5_K and Q6_K), the group's records in K
// order. A record is 16-float vectors, one per row of the group, then the codes:
//   d[16]     the sub-block's scale per row (for Q6_K: of elements 0..15)
//   d1[16]    Q6_K only: the scale of elements 16..31
//   m[16]     formats with a minimum only: what the block adds per unit of x (Q4_1/Q5_1: m; K: -dmin * mn)
//   codes     element e = 4j + t of row r at byte 64 j + 4 r + t (j = 0..7): one 64-byte vector per j holds
//             the 16 rows' four codes of that j, so one 4-byte broadcast of the activations meets 16 rows.
//             4-bit formats (Q4_0, Q4_1, Q4_K) put j + 4 in the high nibble of j's byte (256 bytes); the
//             others take a byte per code (512 bytes): unsigned, except Q8_0's signed codes.
// A weight w = d * (code - offset) (+ m) where offset is 8 (Q4_0), 16 (Q5_0), 32 (Q6_K) or 0. Every scale
// is exact in float32: fp16, or an fp16 times a 6- or 8-bit integer.
#pragma once
#include "blocks.h"

#include <cstdint>

namespace tl {

constexpr int64_t GROUP = 16;  // weight rows per packed group

template <int F> struct Packed {
    static constexpr bool nibbles = F == Q4_0 || F == Q4_1 || F == Q4_K;
    static constexpr bool min = F == Q4_1 || F == Q5_1 || F == Q4_K || F == Q5_K;
    static constexpr bool halves = F == Q6_K;  // two scales per record
    static constexpr bool sign = F == Q8_0;    // signed codes
    static constexpr int offset = F == Q4_0 ? 8 : F == Q5_0 ? 16 : F == Q6_K ? 32 : 0;
    static constexpr bool f16 = !(F == Q4_K || F == Q5_K || F == Q6_K);  // scales stored as float16
    static constexpr int scales = 1 + halves + min;                       // scale vectors before the codes
    static constexpr int64_t scale_bytes = f16 ? 32 : 64;                 // of one scale vector
    static constexpr int64_t code_bytes = nibbles ? 256 : 512;
    static constexpr int64_t codes_at = scale_bytes * scales;
    static constexpr int64_t bytes = codes_at + code_bytes;  // one record
};

// An activation matrix quantized per 32 elements, block-major: block b of row r at b * m + r, so the rows of a
// kernel tile sit side by side at each block (one pointer and constant offsets, not one pointer a row).
struct Q8Act {
    const int8_t* q;      // [K / 32, M, 32]
    const float* d;       // [K / 32, M]
    const int32_t* sum;   // [K / 32, M]: sum of the block's q
    const int32_t* half;  // [K / 32, M]: sum of its first 16 q (Q6_K's two scales)
    const float* s;       // [K / 32, M]: d * sum, as float32
    int64_t kb, m;        // blocks per row, rows
};

// x [m, k] quantized into buffers of the calling thread (valid until its next call), rows split over threads.
Q8Act q8_quantize(const float* x, int64_t m, int64_t k, int threads);

// y [a.m, n] = the quantized activations @ the packed weight^T. Returns 0, or -1 for a format without it.
int q8_matmul(int fmt, const Q8Act& a, const uint8_t* packed, int64_t n, float* y, int threads);

}  // namespace tl
