// Decoding one 32-element sub-block of each GGUF format into float32, bit-identical to the reference: the
// scalar path does the reference's operations in its order (built with -ffp-contract=off so nothing is fused).
// The AVX2 path fuses d * q + m into one FMA only where d * q is exact in float32, so one rounding of the exact
// sum equals the reference's two: q has at most 5 bits and d is an fp16 (11 significant bits), or for Q4_K/Q5_K
// d * scale has 11 + 6 bits; 16 or 22 bits fit float32's 24.
// The NEON path decodes to the same values (a fused d * q + m where d * q is exact, as on AVX2).
//
// The formats are listed once (formats/list.h) and each decodes in its own header (formats/q4_0.h, ...), every
// instruction set's variant there; the functions below are what the kernels call, each Format<F>'s own.
#pragma once
#include <cstdint>

#include "formats/list.h"
#include "simd.h"

namespace tl {

// Each function below is its format's own (a default where the format has none), inlined into the caller first
// (always_inline): the compiler then weighs inlining the format's decode into a kernel as it would a direct call,
// and the kernels compile as they did when these functions held the decodes themselves.
#define TL_FORWARD static inline __attribute__((always_inline))

// Portable decode of sub-block `sub` (32 elements) of block `b` into out[32].
template <int F> TL_FORWARD void decode32_scalar(const uint8_t* b, int sub, float* out) {
    Format<F>::decode32_scalar(b, sub, out);
}

// Sub-blocks that share their code bytes, decoded together by decode_group: a Q4_K/Q5_K pair (low and high
// nibbles of the same 32 bytes), a Q6_K quarter (four sub-blocks over 64 low and 32 high bytes), else one.
template <int F> constexpr int group_subs() { return Format<F>::group_subs; }

#if defined(TL_AVX2) || defined(TL_NEON)
// A K block's sub-block scales, unpacked once per block (formats/k_block.h, q6_k.h); other formats have none.
template <int F> TL_FORWARD void k_scales(const uint8_t* b, float* ks) {
    if constexpr (Format<F>::block_scales) Format<F>::k_scales(b, ks);  // no call at all for the others
}

// Sub-block `sub` into w[0..3], w[i] holding elements 8i..8i+7; ks: the block's k_scales.
template <int F> TL_FORWARD void decode32(const uint8_t* b, int sub, V8* w, const float* ks) {
    Format<F>::decode32(b, sub, w, ks);
}

// decode32 of sub-blocks g * S .. g * S + S - 1 (S = group_subs) into w[4 S], sub-block g * S + i at w[4 i..]: the
// same values, a Q4_K pair's or Q6_K quarter's code bytes loaded once (on AVX2; NEON decodes them one by one).
template <int F> TL_FORWARD void decode_group8(const uint8_t* b, int g, const float* ks, V8* w) {
#ifdef TL_AVX2
    if constexpr (group_subs<F>() > 1) return Format<F>::decode_group8(b, g, ks, w);
#endif
    for (int i = 0; i < group_subs<F>(); ++i) Format<F>::decode32(b, g * group_subs<F>() + i, w + 4 * i, ks);
}
#endif

#if defined(TL_AVX2) && defined(__AVX512F__)
// decode32 sixteen lanes at a time: w01 holds w[0] and w[1] (elements 0-15), w23 w[2] and w[3] (16-31), each
// lane the same operations as there, so the same values. ks: the block's k_scales. STORED: a block of 32's d and
// m are stored and broadcast from memory (from_memory), the cheaper for one row; else broadcast in registers,
// for kernels that keep many accumulators in arrays: from_memory's asm had the compiler store every one of them
// to the stack on each iteration.
template <int F, bool STORED = true>
TL_FORWARD void decode16(const uint8_t* b, int sub, const float* ks, __m512& w01, __m512& w23) {
    Format<F>::template decode16<STORED>(b, sub, ks, w01, w23);
}

// Sub-blocks g * S .. g * S + S - 1 (S = group_subs) into w[2 S]: w[2 i], w[2 i + 1] as decode16 gives sub-block
// g * S + i, the same values with each byte loaded once.
template <int F, bool STORED = true> TL_FORWARD void decode_group(const uint8_t* b, int g, const float* ks, __m512* w) {
    if constexpr (group_subs<F>() > 1)
        Format<F>::template decode_group<STORED>(b, g, ks, w);
    else
        Format<F>::template decode16<STORED>(b, g, ks, w[0], w[1]);
}
#endif

#undef TL_FORWARD

}  // namespace tl
