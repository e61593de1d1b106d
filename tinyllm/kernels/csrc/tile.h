// Several activation rows (batched decode, speculative verification, prompts): weight rows are decoded once
// into a float32 buffer in strips of NR rows, then a register tile of MR activation rows x NR weight rows runs
// over each strip. Many rows (tile_rows): a panel of strips that stays in L2, every group of activation rows
// over the whole panel. Fewer (16-lane tiles, tile_rows_strips): one strip at a time in L1, every group over
// it, the next strip decoded during the first group's tile. Decoding costs once per weight per call instead of
// once per activation row, and each loaded vector feeds several FMAs. Decoded values are the reference's bit
// for bit (blocks.h).
//
// Every output is summed in the order of the one-row kernel (qmatmul.cpp): four 8-lane partial sums, sum g
// taking elements 32 j + 8 g .. 32 j + 8 g + 7 for j = 0, 1, ... in turn, then hsum((p0 + p1) + (p2 + p3)).
// So a row's result is the same bits at any M: rows are batch-invariant. The weight strip and each group of
// TILE_MR activation rows come packed so that a micro tile reads one stream of each: split order puts element
// 32 j + 8 g + l of a row in vector g k / 32 + j (each partial sum's elements in a run of vectors), and a group
// of r rows holds vector v of its rows side by side ([k / 8][r][8]): less time than rows read apart, the same
// bits (docs/benchmarks.md, "Kernel notes").
#pragma once
#include "ahead.h"
#include "blocks.h"
#include "vmath.h"

#include <algorithm>
#include <type_traits>
#include <vector>

namespace tl {

#ifdef TL_SIMD
#if defined(TL_AVX2) && defined(__AVX512F__)
// AVX-512: the tile runs on 16-lane vectors, each two of the four partial sums side by side (lanes 0-7 sum g,
// lanes 8-15 sum g + 1), the pairs as the one-row kernel's decode_group gives them: twice the FMAs a cycle
// where the cores have full-width units, the same sums in the same order, so the same bits.
#define TL_TILE16 1
constexpr int TILE_MR = 4, TILE_NR = 6;  // 24 accumulators + 6 weight vectors + 1 activation vector of 32 zmm
constexpr int TILE_W = 16;               // floats of a packed vector
#elif defined(TL_AVX2) && defined(__AVX512VL__)
constexpr int TILE_MR = 4, TILE_NR = 6;  // 24 accumulators + 6 weight vectors + 1 activation vector of 32 ymm
constexpr int TILE_W = 8;
#else
// AVX2: 12 accumulators + 3 weight vectors + 1 activation vector = 16 ymm; NEON: twice that in 32 halves
constexpr int TILE_MR = 4, TILE_NR = 3;
constexpr int TILE_W = 8;
#endif

// Row i of m activation rows (k floats, k a multiple of 32) into its group of TILE_MR rows (fewer for the last
// group) at out, packed: a group of r rows is [k / 8][r][8], the rows' vectors side by side in split order; with
// 16-lane tiles [k / 16][r][16], vector p nv + j of a row holding partial sums 2p and 2p + 1 of sub-block j
// (elements 32 j + 16 p .. 32 j + 16 p + 15).
static inline void pack_row(const float* x, int64_t k, int64_t i, int64_t m, float* out) {
    const int64_t g0 = i / TILE_MR * TILE_MR, mr = std::min<int64_t>(TILE_MR, m - g0), nv = k / 32;
    float* o = out + g0 * k + (i - g0) * TILE_W;
#ifdef TL_TILE16
    for (int64_t j = 0; j < nv; ++j)
        for (int p = 0; p < 2; ++p) _mm512_storeu_ps(o + (p * nv + j) * mr * 16, _mm512_loadu_ps(x + 32 * j + 16 * p));
#else
    for (int64_t j = 0; j < nv; ++j)
        for (int g = 0; g < 4; ++g) v8_store(o + (g * nv + j) * mr * 8, v8_load(x + 32 * j + 8 * g));
#endif
}

#ifdef TL_AVX2
// hsum of 8 vectors at once, each by hsum's tree (((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7))): the same
// additions of the same pairs, so the same bits, with a few shuffles where hsum takes five operations a vector.
static inline V8 hsum8(const V8* u) {
    const V8 f01 = v8_fold(u[0], u[1]), f23 = v8_fold(u[2], u[3]), f45 = v8_fold(u[4], u[5]), f67 = v8_fold(u[6], u[7]);
    // [u0: s0 + s2, s1 + s3, u2: ..., ... | u1: ..., u3: ...], s = a vector's lanes 0-3 plus lanes 4-7
    const V8 k0 = v8_add(_mm256_shuffle_ps(f01, f23, 0x44), _mm256_shuffle_ps(f01, f23, 0xEE));
    const V8 k1 = v8_add(_mm256_shuffle_ps(f45, f67, 0x44), _mm256_shuffle_ps(f45, f67, 0xEE));
    const V8 r = v8_add(_mm256_shuffle_ps(k0, k1, 0x88), _mm256_shuffle_ps(k0, k1, 0xDD));  // u0 u2 u4 u6 | u1 ...
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
#endif

// y[i * ldy + r] = join4 of the four partial sums of output (i, r), parked in part [4][MR][NR]. Out of line:
// inlined, the compiler kept the joins' vectors in the registers the tile's accumulators need. Eight at a time
// (hsum8, the same additions as hsum) rather than one by one: less time on one thread, level on two.
template <int MR, int NR> __attribute__((noinline)) static void join_tile(const V8* part, float* y, int64_t ldy) {
    constexpr int T = MR * NR;
#ifdef TL_AVX2
    alignas(32) float out[(T + 7) / 8 * 8];
    for (int o0 = 0; o0 < T; o0 += 8) {
        V8 u[8];
        for (int t = 0; t < 8; ++t) {
            const int o = std::min(o0 + t, T - 1);
            u[t] = v8_add(v8_add(part[o], part[T + o]), v8_add(part[2 * T + o], part[3 * T + o]));
        }
        v8_store(out + o0, hsum8(u));
    }
    for (int i = 0; i < MR; ++i)
        for (int r = 0; r < NR; ++r) y[i * ldy + r] = out[i * NR + r];
#else
    for (int o = 0; o < T; ++o) y[o / NR * ldy + o % NR] = join4(part[o], part[T + o], part[2 * T + o], part[3 * T + o]);
#endif
}

// A tile's side job: none, or (16-lane tiles) the next strip's decode, a few units of it an iteration, or lines
// of memory to ask for (LineSide, ahead.h), one or a few an iteration.
struct NoSide {
    void unit() {}
};
template <class S> static inline S side_copy(S* s) { return *s; }
static inline NoSide side_copy(NoSide*) { return {}; }

#ifdef TL_TILE16
// The 16-lane tile's joins, in registers: each accumulator holds two of an output's partial sums side by side
// (lanes 0-7 sum 2 p, 8-15 sum 2 p + 1). pair_fold(a, b) = [a's halves added | b's]: join4's p0 + p1 (or
// p2 + p3) of two outputs in one vector.
static inline __m512 pair_fold(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
}

// hsum's first addition (lanes 0-3 plus lanes 4-7) of the four outputs in u and v, one to a 128-bit lane:
// [u's first, u's second, v's first, v's second].
static inline __m512 fold4(__m512 u, __m512 v) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(u, v, 0x88), _mm512_shuffle_f32x4(u, v, 0xDD));
}

// The rest of hsum's tree for 4 rows x NC <= 4 columns: u01[c] holds the joined pairs of rows 0 and 1 of
// column c, u23[c] those of rows 2 and 3. Returns row i's sums in 128-bit lane i, column c in lane 4 i + c:
// the same additions of the same pairs as join4, so the same bits.
template <int NC> static inline __m512 hsum_4x4(const __m512* u01, const __m512* u23) {
    const __m512 zero = _mm512_setzero_ps();
    __m512 f[4];
    for (int c = 0; c < 4; ++c) f[c] = c < NC ? fold4(u01[c], u23[c]) : zero;
    const __m512 k0 = _mm512_add_ps(_mm512_shuffle_ps(f[0], f[1], 0x44), _mm512_shuffle_ps(f[0], f[1], 0xEE));
    const __m512 k1 = _mm512_add_ps(_mm512_shuffle_ps(f[2], f[3], 0x44), _mm512_shuffle_ps(f[2], f[3], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_ps(k0, k1, 0x88), _mm512_shuffle_ps(k0, k1, 0xDD));
}

// Row i (128-bit lane i of sums) of n <= 4 outputs to y.
static inline void store_lane(__m512 sums, int i, int n, float* y) {
    _mm512_mask_storeu_ps(y, (__mmask16)((1 << n) - 1), _mm512_castps128_ps512(_mm512_extractf32x4_ps(sums, i)));
}

// micro_tile on 16-lane vectors: x: MR rows packed ([k / 16][MR][16]), w: NR rows packed ([k / 16][NR][16]),
// MR <= 4, NR <= 6. Two passes, one for each pair of partial sums; after each, the accumulators are folded in
// pairs of rows (pair_fold) into `joined`, a vector for two outputs, and at the end joined there (hsum_4x4).
// With a side job, `per` of its units an iteration.
template <int MR, int NR, class Side = NoSide>
static void micro_tile(const float* x, const float* w, int64_t k, float* y, int64_t ldy, Side* side = nullptr,
                       int per = 0) {
    static_assert(MR <= 4 && NR <= 6, "the joins take 4 x 6 outputs at most");
    const int64_t nv = k / 32;
    // a copy of the side job's state, here: through the pointer, the compiler reloaded it after every store
    Side job = side_copy(side);
    alignas(64) float joined[2][6][16];  // [rows 0-1, 2-3][column]: parked in memory over the second pass
    for (int p = 0; p < 2; ++p) {
        __m512 acc[MR][NR];
        for (int i = 0; i < MR; ++i)
            for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_setzero_ps();
        const float* wp = w + p * nv * NR * 16;
        const float* xp = x + p * nv * MR * 16;
        for (int64_t j = 0; j < nv; ++j, wp += NR * 16, xp += MR * 16) {
            __m512 wv[NR];
            for (int r = 0; r < NR; ++r) {
                wv[r] = _mm512_loadu_ps(wp + r * 16);
                asm("" : "+v"(wv[r]));  // in a register, one load (as the 8-lane tile)
            }
            for (int i = 0; i < MR; ++i) {
                const __m512 xv = _mm512_loadu_ps(xp + i * 16);
                for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_fmadd_ps(wv[r], xv, acc[i][r]);
            }
            if constexpr (!std::is_same_v<Side, NoSide>)
                for (int u = 0; u < per; ++u) job.unit();
        }
        for (int h = 0; 2 * h < MR; ++h)
            for (int r = 0; r < NR; ++r) {
                const __m512 f = pair_fold(acc[2 * h][r], 2 * h + 1 < MR ? acc[2 * h + 1][r] : _mm512_setzero_ps());
                // (p0 + p1) + (p2 + p3), join4's order
                _mm512_store_ps(joined[h][r], p ? _mm512_add_ps(_mm512_load_ps(joined[h][r]), f) : f);
            }
    }
    if constexpr (!std::is_same_v<Side, NoSide>) *side = job;
    __m512 u01[6], u23[6];
    for (int r = 0; r < NR; ++r) {
        u01[r] = _mm512_load_ps(joined[0][r]);
        u23[r] = MR > 2 ? _mm512_load_ps(joined[1][r]) : _mm512_setzero_ps();
    }
    const __m512 lo = hsum_4x4<NR < 4 ? NR : 4>(u01, u23);
    for (int i = 0; i < MR; ++i) store_lane(lo, i, NR < 4 ? NR : 4, y + i * ldy);
    if constexpr (NR > 4) {
        const __m512 hi = hsum_4x4<NR - 4>(u01 + 4, u23 + 4);
        for (int i = 0; i < MR; ++i) store_lane(hi, i, NR - 4, y + i * ldy + 4);
    }
}
#else
// y[i * ldy + r] = x[i] . w[r] for i < MR, r < NR; x: MR rows packed ([k / 8][MR][8]), w: NR rows packed
// ([k / 8][NR][8]), so each reads as one stream. Each quarter of a row is one partial sum: its MR x NR
// accumulators are parked in `part` after it.
template <int MR, int NR>
static void micro_tile(const float* x, const float* w, int64_t k, float* y, int64_t ldy) {
    V8 part[4][MR][NR];
    const int64_t nv = k / 32;
    for (int g = 0; g < 4; ++g) {
        V8 acc[MR][NR];
        for (int i = 0; i < MR; ++i)
            for (int r = 0; r < NR; ++r) acc[i][r] = v8_zero();
        const float* wp = w + g * nv * NR * 8;
        const float* xp = x + g * nv * MR * 8;
        for (int64_t j = 0; j < nv; ++j, wp += NR * 8, xp += MR * 8) {
            V8 wv[NR];
            // each weight vector feeds MR FMAs: in a register, one load (folded into each FMA, the loads
            // outnumber what the ports take, and the tile ran at a lower share of the FMA peak)
            for (int r = 0; r < NR; ++r) wv[r] = in_register(v8_load(wp + r * 8));
            for (int i = 0; i < MR; ++i) {
                const V8 xv = v8_load(xp + i * 8);
                for (int r = 0; r < NR; ++r) acc[i][r] = v8_fma(wv[r], xv, acc[i][r]);
            }
        }
        for (int i = 0; i < MR; ++i)
            for (int r = 0; r < NR; ++r) part[g][i][r] = acc[i][r];
    }
    join_tile<MR, NR>(&part[0][0][0], y, ldy);
}
#endif

// One group of mr activation rows (packed, pack_row) against NR decoded weight rows w (row length k, packed).
template <int NR> static void tile_group(const float* x, int64_t mr, const float* w, int64_t k, float* y, int64_t ldy) {
    switch (mr) {
        case 4: micro_tile<TILE_MR >= 4 ? 4 : 1, NR>(x, w, k, y, ldy); break;
        case 3: micro_tile<3, NR>(x, w, k, y, ldy); break;
        case 2: micro_tile<2, NR>(x, w, k, y, ldy); break;
        default: micro_tile<1, NR>(x, w, k, y, ldy); break;
    }
}

// Floats of decoded weights a panel holds: several strips, decoded once, that each group of activation rows
// runs over while it stays in L1 (k up to 2048) or L2. Each output is still one micro tile's whole sum, so the
// same bits as strip after strip.
constexpr int64_t PANEL_FLOATS = 1 << 17;
// Up to SMALL_M activation rows (a verification, a batched decode step) a panel serves at most four groups of
// rows, too few to repay decoding into L2: a panel that fits L1 is stored and read back there (8-lane tiles).
constexpr int64_t SMALL_M = 16, SMALL_PANEL_FLOATS = 1 << 13;
// The 16-lane tiles take strips one at a time (tile_rows_strips) up to SMALL_M rows, and beyond while the rows
// fill at most STRIP_X_FLOATS: then the rows stay in L2 and the strip in L1, so the rows' vectors stream from
// L2, each feeding TILE_NR FMAs, where in a panel the weights' vectors stream, each feeding TILE_MR. A row of
// 8192 (the rows out of L2) ran slower so; rows of 576-2048 as fast or faster (docs/benchmarks.md).
constexpr int64_t STRIP_X_FLOATS = 1 << 17;

// y[:, n0:n1] for m activation rows (x [m, k] packed by pack_row, y [m, ldy]); decode(r0, r1, out) writes weight
// rows r0..r1 as float32 into out, packed as one strip ([k / TILE_W][r1 - r0][TILE_W]).
// With `ahead`, each group asks for its share of the Ahead's lines (ahead.h).
template <class Decode>
static void tile_rows(Decode decode, int64_t k, const float* x, int64_t m, float* y, int64_t ldy, int64_t n0,
                      int64_t n1, AheadCursor* ahead = nullptr) {
    const int64_t strips = std::max<int64_t>(1, (m <= SMALL_M ? SMALL_PANEL_FLOATS : PANEL_FLOATS) / (TILE_NR * k));
    thread_local std::vector<float> buf;
    if ((int64_t)buf.size() < strips * TILE_NR * k) buf.resize(strips * TILE_NR * k);
    for (int64_t p = n0; p < n1; p += strips * TILE_NR) {
        const int64_t p1 = std::min(n1, p + strips * TILE_NR);
        for (int64_t n = p; n < p1; n += TILE_NR) decode(n, std::min<int64_t>(n + TILE_NR, p1), buf.data() + (n - p) * k);
        for (int64_t i = 0; i < m; i += TILE_MR) {
            const int64_t mr = std::min<int64_t>(TILE_MR, m - i);
            if (ahead) ahead->ask(mr * (p1 - p) * k);
            for (int64_t n = p; n < p1; n += TILE_NR) {
                const float* w = buf.data() + (n - p) * k;
                float* yi = y + i * ldy + n;
                switch (std::min<int64_t>(TILE_NR, p1 - n)) {
                    case 6: tile_group<TILE_NR >= 6 ? 6 : 1>(x + i * k, mr, w, k, yi, ldy); break;
                    case 5: tile_group<TILE_NR >= 5 ? 5 : 1>(x + i * k, mr, w, k, yi, ldy); break;
                    case 4: tile_group<TILE_NR >= 4 ? 4 : 1>(x + i * k, mr, w, k, yi, ldy); break;
                    case 3: tile_group<3>(x + i * k, mr, w, k, yi, ldy); break;
                    case 2: tile_group<2>(x + i * k, mr, w, k, yi, ldy); break;
                    default: tile_group<1>(x + i * k, mr, w, k, yi, ldy); break;
                }
            }
        }
    }
}

#ifdef TL_TILE16
// The groups of rows over one strip of nr weight rows; with `next`, the first group's tile also decodes the
// next strip (strips.unit() a few times an iteration).
template <class Strips>
static void tile_strip(Strips& strips, const float* w, int64_t nr, int64_t k, const float* x, int64_t m, float* y,
                       int64_t ldy, bool next, AheadCursor* ahead) {
    for (int64_t i = 0; i < m; i += TILE_MR) {
        const int64_t mr = std::min<int64_t>(TILE_MR, m - i);
        float* yi = y + i * ldy;
        const int64_t iters = k / 16;  // of a micro tile, both passes
        if constexpr (Strips::IN_TILE)
            if (i == 0 && next && mr == TILE_MR && nr == TILE_NR) {  // m >= TILE_MR: every group but the last
                if (ahead) ahead->earn(mr * nr * k);  // its lines go with the next group's
                micro_tile<TILE_MR, TILE_NR, Strips>(x, w, k, yi, ldy, &strips, (int)((strips.units() + iters - 1) / iters));
                continue;
            }
        if (ahead && mr == TILE_MR && nr == TILE_NR) {  // the lines asked for one an iteration, among the FMAs
            LineSide lines{nullptr, 0};
            if ((lines.n = ahead->take(mr * nr * k, &lines.p)) > 0) {
                const int per = (int)((lines.n + iters - 1) / iters);
                micro_tile<TILE_MR, TILE_NR, LineSide>(x + i * k, w, k, yi, ldy, &lines, per);
                continue;
            }
        } else if (ahead) {
            ahead->ask(mr * nr * k);
        }
        switch (nr) {
            case 6: tile_group<6>(x + i * k, mr, w, k, yi, ldy); break;
            case 5: tile_group<5>(x + i * k, mr, w, k, yi, ldy); break;
            case 4: tile_group<4>(x + i * k, mr, w, k, yi, ldy); break;
            case 3: tile_group<3>(x + i * k, mr, w, k, yi, ldy); break;
            case 2: tile_group<2>(x + i * k, mr, w, k, yi, ldy); break;
            default: tile_group<1>(x + i * k, mr, w, k, yi, ldy); break;
        }
    }
}

// tile_rows with a decoder of strips (RowDecode in qmatmul.cpp: start_strip(r0, r1, out), unit(), units(),
// finish(), IN_TILE). Strip by strip (see STRIP_X_FLOATS), each decoded (where IN_TILE) during the first
// group's tile over the one before it (two strips' buffers), so that the decode's integer and shuffle work goes
// in among the FMAs instead of in bursts between them; else panels as tile_rows.
template <class Strips>
static void tile_rows_strips(Strips& strips, int64_t k, const float* x, int64_t m, float* y, int64_t ldy, int64_t n0,
                             int64_t n1, AheadCursor* ahead = nullptr) {
    if (m > SMALL_M && m * k > STRIP_X_FLOATS) {
        auto decode = [&strips](int64_t r0, int64_t r1, float* out) {
            strips.start_strip(r0, r1, out);
            strips.finish();
        };
        return tile_rows(decode, k, x, m, y, ldy, n0, n1, ahead);
    }
    thread_local std::vector<float> buf;
    if ((int64_t)buf.size() < 2 * TILE_NR * k) buf.resize(2 * TILE_NR * k);
    float* const bufs[2] = {buf.data(), buf.data() + TILE_NR * k};
    if constexpr (!Strips::IN_TILE) {  // one buffer, decoded then read, strip after strip
        for (int64_t n = n0; n < n1; n += TILE_NR) {
            strips.start_strip(n, std::min(n1, n + TILE_NR), bufs[0]);
            strips.finish();
            tile_strip(strips, bufs[0], std::min<int64_t>(TILE_NR, n1 - n), k, x, m, y + n, ldy, false, ahead);
        }
        return;
    }
    strips.start_strip(n0, std::min(n1, n0 + TILE_NR), bufs[0]);
    strips.finish();
    for (int64_t n = n0, s = 0; n < n1; n += TILE_NR, ++s) {
        const bool next = n + TILE_NR < n1;
        if (next) strips.start_strip(n + TILE_NR, std::min(n1, n + 2 * TILE_NR), bufs[(s + 1) & 1]);
        tile_strip(strips, bufs[s & 1], std::min<int64_t>(TILE_NR, n1 - n), k, x, m, y + n, ldy, next, ahead);
        strips.finish();
    }
}
#endif
#endif

}  // namespace tl
