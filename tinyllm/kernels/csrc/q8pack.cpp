// Rewrites a weight's GGUF blocks into the packed layout of q8act.h, once at load (weights="native-int8").
#include "q8act.h"
#include "pool.h"

#include <algorithm>
#include <cstring>

namespace tl {

Pool& pool();

namespace {

constexpr uint32_t NIBBLES = 0x0F0F0F0F, LOW_BIT = 0x01010101, LOW_TWO = 0x03030303;

// Bits 0..3 of x as the lowest bit of bytes 0..3 (the four shifted copies do not overlap: no carries).
inline uint32_t spread4(uint32_t x) { return ((x & 15) * 0x00204081u) & LOW_BIT; }

inline void store32(uint8_t* at, uint32_t v) { std::memcpy(at, &v, 4); }

// Sub-block `sub` of a block: its 32 codes as eight little-endian words, word m holding elements 4 m .. 4 m + 3
// a byte each (Q8_0's signed, the rest unsigned), and, for the K formats, its two integer scales (Q4_K/Q5_K: sc
// and mn; Q6_K: of elements 0..15 and 16..31). Every byte of a word gets the same shifts and masks, so a word
// holds four codes at once.
template <int F> void sub_block(const uint8_t* b, int sub, uint32_t* w, int* s0, int* s1) {
    *s0 = *s1 = 0;
    if constexpr (F == Q8_0) {
        for (int m = 0; m < 8; ++m) w[m] = u32(b + 2 + 4 * m);
    } else if constexpr (F == Q4_K || F == Q5_K) {
        k_scale_min(b + 4, sub, s0, s1);
        const uint8_t* qs = b + (F == Q4_K ? 16 : 48) + (sub / 2) * 32;
        for (int m = 0; m < 8; ++m) {
            w[m] = (u32(qs + 4 * m) >> (4 * (sub & 1))) & NIBBLES;
            if (F == Q5_K) w[m] |= ((u32(b + 16 + 4 * m) >> sub) & LOW_BIT) << 4;
        }
    } else if constexpr (F == Q6_K) {
        const int h = sub / 4, j = sub % 4;
        *s0 = (int8_t)b[192 + h * 8 + j * 2];
        *s1 = (int8_t)b[192 + h * 8 + j * 2 + 1];
        const uint8_t* ql = b + h * 64 + (j & 1) * 32;
        const uint8_t* qh = b + 128 + h * 32;
        for (int m = 0; m < 8; ++m)
            w[m] = ((u32(ql + 4 * m) >> (4 * (j >> 1))) & NIBBLES) | ((u32(qh + 4 * m) >> (2 * j)) & LOW_TWO) << 4;
    } else {  // Q4_0, Q4_1, Q5_0, Q5_1: element l < 16 in qs[l]'s low nibble, 16 + l in its high one
        constexpr bool min = F == Q4_1 || F == Q5_1, five = F == Q5_0 || F == Q5_1;
        const int qh_at = min ? 4 : 2;
        const uint32_t qh = five ? u32(b + qh_at) : 0;
        const uint8_t* qs = b + qh_at + (five ? 4 : 0);
        for (int m = 0; m < 4; ++m) {
            w[m] = u32(qs + 4 * m) & NIBBLES;
            w[m + 4] = (u32(qs + 4 * m) >> 4) & NIBBLES;
            if (five) {
                w[m] |= spread4(qh >> (4 * m)) << 4;
                w[m + 4] |= spread4(qh >> (16 + 4 * m)) << 4;
            }
        }
    }
}

// Row r's four bytes at `at` (= codes + 4 r) of each vector its codes (words w) go to (q8act.h): element e = 4 j
// + t is byte t of vector j (Q8_0: word j whole), or the low (j < 4) or high nibble of vector j % 4's, its bits
// above the nibble at bit bit(j) of plane(j)'s.
template <int F> inline void codes(const uint32_t* w, uint8_t* at) {
    using P = Packed<F>;
    if constexpr (!P::nibbles) {
        for (int j = 0; j < 8; ++j) store32(at + 64 * j, w[j]);
    } else {
        for (int j = 0; j < 4; ++j) store32(at + 64 * j, (w[j] & NIBBLES) | (w[j + 4] & NIBBLES) << 4);
        if constexpr (P::high > 0) {
            uint32_t planes[2] = {0, 0};
            for (int j = 0; j < 8; ++j)
                planes[(P::plane(j) - 256) / 64] |= ((w[j] >> 4) & (P::high == 1 ? LOW_BIT : LOW_TWO)) << P::bit(j);
            for (int i = 0; i < P::high; ++i) store32(at + 256 + 64 * i, planes[i]);
        }
    }
}

struct PackJob {
    const uint8_t* data;
    int64_t n, k, stride;
    uint8_t* out;
};

template <int F> void pack_group(void* ctx, int64_t g) {
    using P = Packed<F>;
    static_assert(Traits<F>::block == 32 * P::subs, "a unit is one block");
    const PackJob& j = *static_cast<const PackJob*>(ctx);
    const int64_t kb = j.k / 32;
    uint8_t* group = j.out + g * P::group_bytes(kb);
    if ((g + 1) * GROUP > j.n) std::memset(group, 0, P::group_bytes(kb));  // padded rows: zero scales and codes
    uint32_t c[8];
    // A row at a time, its blocks in order: one stream the hardware prefetcher follows (block-major over the
    // group's 16 rows waited on a miss per block), writing into the group, which stays in the caches.
    for (int64_t r = 0; r < GROUP && g * GROUP + r < j.n; ++r) {
        const uint8_t* row = j.data + (g * GROUP + r) * j.stride;
        for (int64_t u = 0; u < kb / P::subs; ++u) {
            uint8_t* unit = P::unit_of(group, u * P::subs);
            const uint8_t* blk = row + u * Traits<F>::bytes;
            std::memcpy(unit + 2 * r, blk + (F == Q6_K ? 208 : 0), 2);  // d
            if (P::min) {                                                // m, or dmin negated
                std::memcpy(unit + 32 + 2 * r, blk + 2, 2);
                if (P::k) unit[32 + 2 * r + 1] ^= 0x80;  // float16's sign bit (little-endian)
            }
            for (int t = 0; t < P::subs; ++t) {
                int s0, s1;
                sub_block<F>(blk, t, c, &s0, &s1);
                uint8_t* sub = P::sub_of(group, u * P::subs + t);
                if (P::k) {
                    sub[r] = (uint8_t)s0;
                    sub[16 + r] = (uint8_t)s1;
                }
                codes<F>(c, sub + P::ints + 4 * r);
            }
        }
    }
}

// Bytes of a group's units, for kb 32-element blocks of K; -1 for a format without the kernel, or a K that is
// not whole blocks.
int64_t group_bytes(int fmt, int64_t kb) {
    switch (fmt) {
#define TL_Q8_CASE(F, ...) \
    case F: return kb % Packed<F>::subs ? -1 : Packed<F>::group_bytes(kb);
        TL_FORMATS(TL_Q8_CASE)
#undef TL_Q8_CASE
        default: return -1;
    }
}

}  // namespace
}  // namespace tl

extern "C" {

// Bytes of the packed form of an [n, k] weight in format fmt, or -1 for a format without it.
int64_t tl_q8_packed_bytes(int fmt, int64_t n, int64_t k) {
    const int64_t group = k % 32 ? -1 : tl::group_bytes(fmt, k / 32);
    return group < 0 ? -1 : (n + tl::GROUP - 1) / tl::GROUP * group;
}

// Writes the packed form of the [n, k] weight (rows `stride` bytes apart) into out. Returns 0, or -1.
int tl_q8_pack(int fmt, const uint8_t* data, int64_t n, int64_t k, int64_t stride, uint8_t* out, int threads) {
    using namespace tl;
    void (*group)(void*, int64_t);
    switch (fmt) {
#define TL_Q8_CASE(F, ...) case F: group = pack_group<F>; break;
        TL_FORMATS(TL_Q8_CASE)
#undef TL_Q8_CASE
        default: return -1;
    }
    PackJob job{data, n, k, stride, out};
    pool().run(group, &job, (n + GROUP - 1) / GROUP, threads);
    return 0;
}
}
