// Rewrites a weight's GGUF blocks into the packed layout of q8act.h, once at load (weights="native-int8").
#include "q8act.h"
#include "pool.h"

#include <algorithm>
#include <cstring>

namespace tl {

Pool& pool();

namespace {

constexpr uint32_t NIBBLES = 0x0F0F0F0F, LOW_BIT = 0x01010101, LOW_TWO = 0x03030303;

inline void store32(uint8_t* at, uint32_t v) { std::memcpy(at, &v, 4); }

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
            if constexpr (P::bf16) {  // d, or a scale float16 cannot hold as bfloat16
                const uint16_t d = Format<F>::scale_bf16_bits(blk);
                std::memcpy(unit + 2 * r, &d, 2);
            } else {
                std::memcpy(unit + 2 * r, blk + Format<F>::d_offset, 2);
            }
            if (P::min) {                                                // m, or dmin negated
                std::memcpy(unit + 32 + 2 * r, blk + 2, 2);
                if (P::k) unit[32 + 2 * r + 1] ^= 0x80;  // float16's sign bit (little-endian)
            }
            for (int t = 0; t < P::subs; ++t) {
                int s0, s1;
                Format<F>::codes32(blk, t, c, &s0, &s1);
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
