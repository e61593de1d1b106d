// Rewrites a weight's GGUF blocks into the packed layout of q8act.h, once at load (weights="native-int8").
#include "q8act.h"
#include "pool.h"

#include <algorithm>
#include <cstring>

namespace tl {

Pool& pool();

namespace {

// Sub-block `sub` of a block: its codes as ints in element order (Q8_0 signed, the rest unsigned), its scale
// (two for Q6_K: elements 0..15 and 16..31) and its minimum's multiplier m.
template <int F> void sub_block(const uint8_t* b, int sub, int* c, float* d0, float* d1, float* m) {
    *m = 0.0f;
    if constexpr (F == Q8_0) {
        *d0 = *d1 = f16(b);
        for (int l = 0; l < 32; ++l) c[l] = (int8_t)b[2 + l];
    } else if constexpr (F == Q4_K || F == Q5_K) {
        int sc, mn;
        k_scale_min(b + 4, sub, &sc, &mn);
        *d0 = *d1 = f16(b) * (float)sc;
        *m = -(f16(b + 2) * (float)mn);
        const uint8_t* qs = b + (F == Q4_K ? 16 : 48) + (sub / 2) * 32;
        for (int l = 0; l < 32; ++l) {
            c[l] = (qs[l] >> (4 * (sub & 1))) & 15;
            if (F == Q5_K) c[l] |= ((b[16 + l] >> sub) & 1) << 4;
        }
    } else if constexpr (F == Q6_K) {
        const int h = sub / 4, j = sub % 4;
        const float d = f16(b + 208);
        *d0 = d * (float)(int8_t)b[192 + h * 8 + j * 2];
        *d1 = d * (float)(int8_t)b[192 + h * 8 + j * 2 + 1];
        const uint8_t* ql = b + h * 64 + (j & 1) * 32;
        const uint8_t* qh = b + 128 + h * 32;
        for (int l = 0; l < 32; ++l) c[l] = ((ql[l] >> (4 * (j >> 1))) & 15) | (((qh[l] >> (2 * j)) & 3) << 4);
    } else {  // Q4_0, Q4_1, Q5_0, Q5_1
        constexpr bool min = F == Q4_1 || F == Q5_1, five = F == Q5_0 || F == Q5_1;
        *d0 = *d1 = f16(b);
        if (min) *m = f16(b + 2);
        const int qh_at = min ? 4 : 2;
        const uint32_t qh = five ? u32(b + qh_at) : 0;
        const uint8_t* qs = b + qh_at + (five ? 4 : 0);
        for (int l = 0; l < 16; ++l) {
            c[l] = (qs[l] & 15) | (int)(((qh >> l) & 1) << 4);
            c[l + 16] = (qs[l] >> 4) | (int)(((qh >> (l + 16)) & 1) << 4);
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
    const PackJob& j = *static_cast<const PackJob*>(ctx);
    constexpr int subs = Traits<F>::block / 32;
    const int64_t kb = j.k / 32;
    uint8_t* rec = j.out + g * kb * P::bytes;
    std::memset(rec, 0, kb * P::bytes);  // padded rows: zero scales and codes
    int c[32];
    for (int64_t b = 0; b < kb; ++b, rec += P::bytes) {
        uint8_t* codes = rec + P::codes_at;
        for (int64_t r = 0; r < GROUP && g * GROUP + r < j.n; ++r) {
            const uint8_t* blk = j.data + (g * GROUP + r) * j.stride + b / subs * Traits<F>::bytes;
            float s0, s1, mn;
            sub_block<F>(blk, (int)(b % subs), c, &s0, &s1, &mn);
            if constexpr (P::f16) {  // the block's own float16 d (and m, the next two bytes)
                std::memcpy(rec + 2 * r, blk, 2);
                if (P::min) std::memcpy(rec + P::scale_bytes + 2 * r, blk + 2, 2);
            } else {
                float* d = reinterpret_cast<float*>(rec);
                d[r] = s0;
                if (P::halves) d[16 + r] = s1;
                if (P::min) d[16 * (1 + P::halves) + r] = mn;
            }
            for (int e = 0; e < 32; ++e) {
                const int jj = e / 4, at = 4 * (int)r + e % 4;
                if (P::nibbles)
                    codes[64 * (jj % 4) + at] |= (uint8_t)(c[e] << (jj < 4 ? 0 : 4));
                else
                    codes[64 * jj + at] = (uint8_t)c[e];
            }
        }
    }
}

template <int F> int64_t record_bytes() { return Packed<F>::bytes; }

int64_t bytes_per_record(int fmt) {
    switch (fmt) {
        case Q4_0: return record_bytes<Q4_0>();
        case Q4_1: return record_bytes<Q4_1>();
        case Q5_0: return record_bytes<Q5_0>();
        case Q5_1: return record_bytes<Q5_1>();
        case Q8_0: return record_bytes<Q8_0>();
        case Q4_K: return record_bytes<Q4_K>();
        case Q5_K: return record_bytes<Q5_K>();
        case Q6_K: return record_bytes<Q6_K>();
        default: return -1;
    }
}

}  // namespace
}  // namespace tl

extern "C" {

// Bytes of the packed form of an [n, k] weight in format fmt, or -1 for a format without it.
int64_t tl_q8_packed_bytes(int fmt, int64_t n, int64_t k) {
    const int64_t rec = tl::bytes_per_record(fmt);
    return rec < 0 || k % 32 ? -1 : (n + tl::GROUP - 1) / tl::GROUP * (k / 32) * rec;
}

// Writes the packed form of the [n, k] weight (rows `stride` bytes apart) into out. Returns 0, or -1.
int tl_q8_pack(int fmt, const uint8_t* data, int64_t n, int64_t k, int64_t stride, uint8_t* out, int threads) {
    using namespace tl;
    void (*group)(void*, int64_t);
    switch (fmt) {
        case Q4_0: group = pack_group<Q4_0>; break;
        case Q4_1: group = pack_group<Q4_1>; break;
        case Q5_0: group = pack_group<Q5_0>; break;
        case Q5_1: group = pack_group<Q5_1>; break;
        case Q8_0: group = pack_group<Q8_0>; break;
        case Q4_K: group = pack_group<Q4_K>; break;
        case Q5_K: group = pack_group<Q5_K>; break;
        case Q6_K: group = pack_group<Q6_K>; break;
        default: return -1;
    }
    PackJob job{data, n, k, stride, out};
    pool().run(group, &job, (n + GROUP - 1) / GROUP, threads);
    return 0;
}
}
