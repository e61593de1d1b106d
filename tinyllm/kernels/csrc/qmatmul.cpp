// y[M, N] = x[M, K] @ W[N, K]^T with W kept as GGUF blocks, dequantized on the fly with float32 activations.
// Below tile_min_m activation rows: each 32-weight sub-block is decoded in registers and FMA'd with every
// activation row (16-lane builds: two weight rows at a time, pair_rows, and four at one activation row,
// quad_rows; else one, dot_row and dot_row_m). From tile_min_m on, rows are decoded once into a buffer and a
// register tile runs over it (tile.h). All of them sum an output in one order (four partial sums, joined the
// same way), so a row's result is the same bits at any M: rows are batch-invariant, as the portable path's
// are. Threads take chunks of output rows. Large M on the module path is the caller's BLAS on rows decoded by
// tl_dequantize.
// What differs by format is the format's own (formats/, Format<F>): its decode, and its choices here:
// tile_min_m (7, Q4_1 10; 8 on 8-lane builds), rows_at_m1 (four weight rows at one activation row; two for
// Q6_K and Q8_0, one for Q5_1: each lane of an output is one chain of FMAs, so more rows' chains in flight
// keep the FMA ports busy until the decoded sub-blocks spill), ahead_into_l2 and decode_in_tile. pair_rows
// takes the activation rows in groups of at most 6, 5 or 3 (blocks of 32, a Q4_K/Q5_K pair, a Q6_K quarter:
// what the 32 registers hold), as even as they go; each activation vector is loaded into a register once and
// feeds every weight row's FMAs.
#include "blocks.h"
#include "pool.h"
#include "tile.h"

#include <algorithm>

namespace tl {

struct Weight {
    const uint8_t* data;
    int64_t n, k, stride;  // rows, columns, bytes between rows
};

// The tile (tile.h) decodes a panel of weight rows in a burst between runs of FMAs over the previous panel, and
// the hardware prefetchers, idle while those ran, are late for each burst: at a few activation rows the decode's
// loads missed and waited for most of its time. Each line is fetched DECODE_AHEAD bytes before it is decoded
// (8 and 32 KB measured the same; docs/benchmarks.md has the figures).
constexpr int64_t DECODE_AHEAD = 16384;

#ifdef TL_AVX2
// Formats whose lines a kernel at one activation row fetches ahead into L2 (prefetcht1) rather than into L1
// (Format<F>::ahead_into_l2: Q8_0 and Q4_K ran faster so from memory, Q4_0 slower, the rest level; at 2-8
// activation rows it was slower for all).
template <int F> constexpr bool ahead_into_l2() { return Format<F>::ahead_into_l2; }

// The line DECODE_AHEAD bytes past p, fetched into L1 (L2 with L2), by an asm that reads no memory the compiler
// knows of: _mm_prefetch (or any asm with a memory operand) in a loop had the compiler store a kernel's arrays
// of accumulators to the stack on every iteration.
template <bool L2 = false> static inline void prefetch_ahead(const char* p) {
    if constexpr (L2)
        asm volatile("prefetcht1 %c1(%0)" : : "r"(p), "i"(DECODE_AHEAD));
    else
        asm volatile("prefetcht0 %c1(%0)" : : "r"(p), "i"(DECODE_AHEAD));
}
#endif

#if defined(TL_AVX2) && defined(__AVX512F__)
// Weight rows decoded to float32 a group of sub-blocks (decode_group) per unit(), as plain rows (start_rows) or as
// one strip packed for the tile (start_strip), so that the tile can take the next strip's decode in among its
// FMAs (tile_rows_strips). Held by value where it runs: read through a pointer, the compiler reloaded its
// state after every store (the output might alias it).
template <int F> struct RowDecode {
    using T = Traits<F>;
    static constexpr int S = group_subs<F>(), GROUPS = T::block / 32 / S;
    // Whether the tile takes this format's decode in among its FMAs: the blocks of 32 and Q4_K decode with
    // tables, shuffles and integer operations; Q5_K, Q6_K and Q8_0 convert and scale on the FMAs' own ports,
    // and ran slower so (paired runs per format, docs/benchmarks.md).
    static constexpr bool IN_TILE = Format<F>::decode_in_tile;
    Weight w;
    const uint8_t* row = nullptr;
    float *o = nullptr, *row_out = nullptr;
    int64_t step = 0, half = 0, next_row = 0, rows = 0, left = 0, b = 0;
    int g = 0;
    alignas(64) float ks[16];

    explicit RowDecode(const Weight& weight) : w(weight) {}
    // rows r0..r1 at out, leading dim ld: sub-block j's 32 values at 32 j
    void start_rows(int64_t r0, int64_t r1, float* out, int64_t ld) { start(r0, r1, out, 32, 16, ld); }
    // rows r0..r1 as one strip: the pair of partial sums p of sub-block j of row n is vector p k / 32 + j of
    // the strip's rows (tile.h)
    void start_strip(int64_t r0, int64_t r1, float* out) {
        start(r0, r1, out, (r1 - r0) * 16, w.k / 32 * (r1 - r0) * 16, 16);
    }
    int64_t units() const { return rows * (w.k / T::block) * GROUPS; }
    void unit() {
        if (left == 0) return;
        group(row + b * T::bytes);
        if (++g < GROUPS) return;
        g = 0;
        if (++b < w.k / T::block) return;
        next();
    }
    void finish() {  // the rest, in loops, on a copy (see above)
        RowDecode d = *this;
        for (const int64_t nb = w.k / T::block; d.left; d.next())
            for (; d.b < nb; ++d.b, d.g = 0)
                for (const uint8_t* blk = d.row + d.b * T::bytes; d.g < GROUPS; ++d.g) d.group(blk);
        *this = d;
    }

  private:
    void group(const uint8_t* blk) {  // group g of block blk
        if (g == 0) {
            for (int64_t at = 0; at < T::bytes; at += 64) prefetch_ahead((const char*)blk + at);
            k_scales<F>(blk, ks);
        }
        __m512 v[2 * S];
        decode_group<F>(blk, g, ks, v);
        for (int i = 0; i < S; ++i, o += step) {
            _mm512_storeu_ps(o, v[2 * i]);
            _mm512_storeu_ps(o + half, v[2 * i + 1]);
        }
    }
    void next() {  // the next row
        b = 0;
        row += w.stride;
        o = row_out += next_row;
        --left;
    }
    void start(int64_t r0, int64_t r1, float* out, int64_t step_, int64_t half_, int64_t next_row_) {
        row = w.data + r0 * w.stride;
        o = row_out = out;
        step = step_;
        half = half_;
        next_row = next_row_;
        rows = left = r1 - r0;
        b = 0;
        g = 0;
    }
};
#endif

// Weight rows n0..n1 as float32 rows of k at out (leading dim ld); PACKED: as one strip packed for tile.h (the
// 8-lane tiles; the 16-lane ones take RowDecode's strips). The sizes are copied into locals first: read through
// w, the compiler reloaded them after every store (out might alias them), and the packed index's arithmetic
// spilled into vector registers around the decode.
template <int F, bool PACKED = false>
static void decode_rows(const Weight& w, int64_t n0, int64_t n1, float* out, int64_t ld) {
#if defined(TL_AVX2) && defined(__AVX512F__)
    static_assert(!PACKED, "16-lane strips: RowDecode::start_strip");
    RowDecode<F> rows(w);
    rows.start_rows(n0, n1, out, ld);
    rows.finish();
#else
    using T = Traits<F>;
    const int64_t num_blocks = w.k / T::block, stride = w.stride;
    const uint8_t* const data = w.data;
#ifdef TL_SIMD
    const int64_t step = PACKED ? (n1 - n0) * 8 : 32, quarter = PACKED ? w.k / 32 * (n1 - n0) * 8 : 8;
#endif
    for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* row = data + n * stride;
#ifdef TL_SIMD
        float* o = out + (n - n0) * (PACKED ? TILE_W : ld);
#else
        float* o = out + (n - n0) * ld;
#endif
        for (int64_t b = 0; b < num_blocks; ++b) {
            const uint8_t* blk = row + b * T::bytes;
#ifdef TL_AVX2
            for (int64_t at = 0; at < T::bytes; at += 64) prefetch_ahead((const char*)blk + at);
#endif
#ifdef TL_SIMD
            alignas(32) float ks[16];
            k_scales<F>(blk, ks);
            constexpr int S = group_subs<F>();
            for (int gr = 0; gr < T::block / 32 / S; ++gr) {
                V8 v[4 * S];
                decode_group8<F>(blk, gr, ks, v);
                for (int i = 0; i < S; ++i, o += step)
                    for (int g = 0; g < 4; ++g) v8_store(o + g * quarter, v[4 * i + g]);
            }
#else
            for (int s = 0; s < T::block / 32; ++s, o += 32) decode32_scalar<F>(blk, s, o);
#endif
        }
    }
#endif
}

// One weight row against one activation row.
template <int F> static float dot_row(const uint8_t* row, int64_t num_blocks, const float* x) {
    using T = Traits<F>;
#ifdef TL_SIMD
    V8 acc[4] = {v8_zero(), v8_zero(), v8_zero(), v8_zero()};
    for (int64_t b = 0; b < num_blocks; ++b) {
        const uint8_t* blk = row + b * T::bytes;
        alignas(32) float ks[16];
        k_scales<F>(blk, ks);
        constexpr int S = group_subs<F>();
        for (int gr = 0; gr < T::block / 32 / S; ++gr, x += 32 * S) {
            V8 v[4 * S];
            decode_group8<F>(blk, gr, ks, v);
            for (int g = 0; g < 4; ++g)  // each accumulator takes the group's sub-blocks in order
                for (int i = 0; i < S; ++i) acc[g] = v8_fma(v[4 * i + g], v8_load(x + 32 * i + 8 * g), acc[g]);
        }
    }
    return join4(acc[0], acc[1], acc[2], acc[3]);
#else
    float acc[8] = {0};
    float v[32];
    for (int64_t b = 0; b < num_blocks; ++b)
        for (int s = 0; s < T::block / 32; ++s, x += 32) {
            decode32_scalar<F>(row + b * T::bytes, s, v);
            for (int l = 0; l < 32; ++l) acc[l & 7] += v[l] * x[l];
        }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
#endif
}

#if defined(TL_AVX2) && defined(__AVX512F__)
// dot_row sixteen lanes at a time (decode_group): accumulator 01 holds dot_row's acc[0] in lanes 0-7 and acc[1] in
// 8-15 (23 likewise), each lane the same operations as there, so the same bits in half the instructions.
template <int F> static float dot_row16(const uint8_t* row, int64_t num_blocks, const float* x) {
    using T = Traits<F>;
    __m512 a01 = _mm512_setzero_ps(), a23 = _mm512_setzero_ps();
    for (int64_t b = 0; b < num_blocks; ++b) {
        const uint8_t* blk = row + b * T::bytes;
        alignas(32) float ks[16];
        k_scales<F>(blk, ks);
        const float* scales = T::block > 32 ? from_memory<16>(ks) : ks;
        constexpr int S = group_subs<F>();
        for (int g = 0; g < T::block / 32 / S; ++g) {
            __m512 w[2 * S];
            decode_group<F>(blk, g, scales, w);
            for (int i = 0; i < S; ++i, x += 32) {  // sub-blocks in order
                a01 = _mm512_fmadd_ps(w[2 * i], _mm512_loadu_ps(x), a01);
                a23 = _mm512_fmadd_ps(w[2 * i + 1], _mm512_loadu_ps(x + 16), a23);
            }
        }
    }
    return join4(_mm512_castps512_ps256(a01), high256(a01), _mm512_castps512_ps256(a23), high256(a23));
}
#endif

// Activation rows one decode of a weight row serves (dot_row_m): four accumulators each, in 32 (AVX-512VL) or
// 16 (AVX2) vector registers beside the decoded sub-block; NEON's 32 registers hold half a V8 each.
#if defined(TL_AVX2) && defined(__AVX512VL__) || !defined(TL_SIMD)
constexpr int ROW_TILE = 6;
#else
constexpr int ROW_TILE = 3;
#endif

// One weight row against MT activation rows (x leading dim k, y leading dim ldy): each sub-block is decoded
// once and used MT times. Each output is summed as dot_row sums it (four accumulators, one per vector of a
// sub-block, joined the same way), so a row's result does not depend on M.
template <int F, int MT>
static void dot_row_m(const uint8_t* row, int64_t num_blocks, const float* x, int64_t k, float* y, int64_t ldy) {
    using T = Traits<F>;
#ifdef TL_SIMD
    V8 acc[MT][4];
    for (int m = 0; m < MT; ++m)
        for (int g = 0; g < 4; ++g) acc[m][g] = v8_zero();
    for (int64_t b = 0; b < num_blocks; ++b) {
        alignas(32) float ks[16];
        k_scales<F>(row + b * T::bytes, ks);
        for (int s = 0; s < T::block / 32; ++s, x += 32) {
            V8 v[4];
            decode32<F>(row + b * T::bytes, s, v, ks);
            for (int m = 0; m < MT; ++m)
                for (int g = 0; g < 4; ++g) acc[m][g] = v8_fma(v[g], v8_load(x + m * k + 8 * g), acc[m][g]);
        }
    }
    for (int m = 0; m < MT; ++m) y[m * ldy] = join4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]);
#else
    float acc[MT][8] = {};
    float v[32];
    for (int64_t b = 0; b < num_blocks; ++b)
        for (int s = 0; s < T::block / 32; ++s, x += 32) {
            decode32_scalar<F>(row + b * T::bytes, s, v);
            for (int m = 0; m < MT; ++m)
                for (int l = 0; l < 32; ++l) acc[m][l & 7] += v[l] * x[m * k + l];
        }
    for (int m = 0; m < MT; ++m) {
        const float* a = acc[m];
        y[m * ldy] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    }
#endif
}

#if defined(TL_AVX2) && defined(__AVX512F__)
// NR (1, 2 or 4) weight rows against MT activation rows (x leading dim k, y leading dim ldy), decoded in
// registers: each output's accumulators are dot_row16's, so the same bits. Several weight rows at once: each
// activation vector loaded feeds every row's FMAs, and independent chains of FMAs run where one row's wait on
// each other (4 rows only with one activation row: quad_rows). The
// activation vectors are held in registers (folded into every FMA, the loads outnumbered what the ports take);
// nothing in the loop reads memory through an asm or a prefetch builtin, which had the compiler keep the
// accumulators' array in memory, stored on every iteration (decode16's STORED, prefetch_ahead).
template <int F, int NR, int MT>
static void dot_rows_m16(const uint8_t* row, int64_t stride, int64_t num_blocks, const float* x, int64_t k, float* y,
                         int64_t ldy) {
    using T = Traits<F>;
    constexpr int S = group_subs<F>();
    __m512 acc[MT][NR][2];  // [activation row][weight row][partial sums 0-1 | 2-3]
    for (int m = 0; m < MT; ++m)
        for (int r = 0; r < NR; ++r) acc[m][r][0] = acc[m][r][1] = _mm512_setzero_ps();
    for (int64_t b = 0; b < num_blocks; ++b) {
        alignas(64) float ks[NR][16];
        const float* scales[NR];
        for (int r = 0; r < NR; ++r) {
            for (int64_t at = 0; at < T::bytes; at += 64)
                prefetch_ahead<MT == 1 && ahead_into_l2<F>()>((const char*)row + r * stride + b * T::bytes + at);
            k_scales<F>(row + r * stride + b * T::bytes, ks[r]);
            scales[r] = T::block > 32 && MT == 1 ? from_memory<16>(ks[r]) : ks[r];  // see from_memory
        }
        for (int g = 0; g < T::block / 32 / S; ++g) {
            __m512 w[NR][2 * S];
            for (int r = 0; r < NR; ++r) decode_group<F, false>(row + r * stride + b * T::bytes, g, scales[r], w[r]);
            for (int i = 0; i < S; ++i, x += 32)  // sub-blocks in order
                for (int m = 0; m < MT; ++m) {
                    __m512 lo = _mm512_loadu_ps(x + m * k), hi = _mm512_loadu_ps(x + m * k + 16);
                    asm("" : "+v"(lo), "+v"(hi));  // in registers, one load each
                    for (int r = 0; r < NR; ++r) {
                        acc[m][r][0] = _mm512_fmadd_ps(w[r][2 * i], lo, acc[m][r][0]);
                        acc[m][r][1] = _mm512_fmadd_ps(w[r][2 * i + 1], hi, acc[m][r][1]);
                    }
                }
        }
    }
    for (int m = 0; m < MT; ++m)
        for (int r = 0; r < NR; ++r) {
            const __m512 a = acc[m][r][0], c = acc[m][r][1];
            y[m * ldy + r] = join4(_mm512_castps512_ps256(a), high256(a), _mm512_castps512_ps256(c), high256(c));
        }
}

// The most activation rows dot_rows_m16 takes at once with two weight rows: its accumulators and decoded
// sub-blocks (2 S vectors a weight row) fill the 32 registers (Q4_K and Q5_K at 5 spill a few, and still ran
// faster than at 4); one row more ran slower.
template <int F> constexpr int pair_max_m() { return group_subs<F>() == 1 ? 6 : group_subs<F>() == 2 ? 5 : 3; }

// dot_rows_m16 for mt <= MT activation rows and nr (1 or 2) weight rows.
template <int F, int MT>
static void rows_group(int64_t mt, int nr, const uint8_t* row, int64_t stride, int64_t num_blocks, const float* x,
                       int64_t k, float* y, int64_t ldy) {
    if (mt < MT) {
        if constexpr (MT > 1) rows_group<F, MT - 1>(mt, nr, row, stride, num_blocks, x, k, y, ldy);
    } else if (nr == 2) {
        dot_rows_m16<F, 2, MT>(row, stride, num_blocks, x, k, y, ldy);
    } else {
        dot_rows_m16<F, 1, MT>(row, stride, num_blocks, x, k, y, ldy);
    }
}

// The first DECODE_AHEAD bytes of weight rows n0..n1, which the kernels' own prefetches start past: a matmul of
// a small model's layer is a few chunks of tens of KB, each a new stream that a kernel otherwise began by
// waiting on.
static void prefetch_head(const Weight& w, int64_t n0, int64_t n1) {
    const char* first = (const char*)(w.data + n0 * w.stride);
    const int64_t head = std::min<int64_t>(DECODE_AHEAD, (n1 - n0) * w.stride);
    for (int64_t at = 0; at < head; at += 64) _mm_prefetch(first + at, _MM_HINT_T0);
}

// Weight rows n0..n1 against m activation rows, two weight rows at a time, the activation rows in groups of
// at most pair_max_m as even as they go (8 as 4 + 4, not 6 + 2).
template <int F>
static void pair_rows(const Weight& w, const float* x, int64_t m, float* y, int64_t n0, int64_t n1,
                      AheadCursor* ahead = nullptr) {
    const int64_t num_blocks = w.k / Traits<F>::block, groups = (m + pair_max_m<F>() - 1) / pair_max_m<F>();
    prefetch_head(w, n0, n1);
    for (int64_t n = n0; n < n1; n += 2)
        for (int64_t gi = 0, m0 = 0, m1; gi < groups; ++gi, m0 = m1) {
            m1 = m * (gi + 1) / groups;
            if (ahead) ahead->ask((m1 - m0) * std::min<int64_t>(2, n1 - n) * w.k);
            rows_group<F, pair_max_m<F>()>(m1 - m0, n + 1 < n1 ? 2 : 1, w.data + n * w.stride, w.stride, num_blocks,
                                          x + m0 * w.k, w.k, y + m0 * w.n + n, w.n);
        }
}

// One activation row against weight rows n0..n1, four weight rows at a time (then two, one): each output is
// one chain of FMAs per lane (the same bits as one row alone), so a row's chains wait on their FMAs' latency;
// four rows' chains in flight keep the FMA ports busy where two left them waiting.
template <int F> static void quad_rows(const Weight& w, const float* x, float* y, int64_t n0, int64_t n1) {
    const int64_t num_blocks = w.k / Traits<F>::block;
    prefetch_head(w, n0, n1);
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) dot_rows_m16<F, 4, 1>(w.data + n * w.stride, w.stride, num_blocks, x, w.k, y + n, w.n);
    for (; n + 2 <= n1; n += 2) dot_rows_m16<F, 2, 1>(w.data + n * w.stride, w.stride, num_blocks, x, w.k, y + n, w.n);
    if (n < n1) dot_rows_m16<F, 1, 1>(w.data + n * w.stride, w.stride, num_blocks, x, w.k, y + n, w.n);
}
#endif

// The fewest activation rows the tile serves; fewer go through dot_row_m (8-lane builds) or pair_rows (16-lane).
// pair_rows runs near the FMA rate at a few rows, but its decode is per weight row per group of activation
// rows; from here on, the tile's decode once per weight row is the cheaper (paired runs per format and M,
// docs/benchmarks.md).
template <int F> constexpr int64_t tile_min_m() {
#ifdef TL_TILE16
    return Format<F>::tile_min_m;  // 7; Q4_1 10
#else
    return 8;
#endif
}

// With `ahead`, the kernels of several activation rows ask for its lines as they go (ahead.h).
template <int F>
static void rows_chunk(const Weight& w, const float* x, int64_t m, float* y, int64_t n0, int64_t n1,
                       AheadCursor* ahead = nullptr) {
    const int64_t num_blocks = w.k / Traits<F>::block;
    if (m == 1) {
#if defined(TL_AVX2) && defined(__AVX512F__)
        // several weight rows at once (docs/benchmarks.md), Format<F>::rows_at_m1: four; two for Q6_K (four rows
        // of its four decoded sub-blocks spill) and Q8_0 (from memory, its 34 bytes per 32 weights read slower
        // as four streams a thread); Q5_1 keeps the one-row kernel (no table: FMAs in its decode, slower in pairs)
        static_assert(Format<F>::rows_at_m1 == 1 || Format<F>::rows_at_m1 == 2 || Format<F>::rows_at_m1 == 4);
        if constexpr (Format<F>::rows_at_m1 == 2) return pair_rows<F>(w, x, m, y, n0, n1);
        if constexpr (Format<F>::rows_at_m1 == 4) return quad_rows<F>(w, x, y, n0, n1);
        for (int64_t n = n0; n < n1; ++n) y[n] = dot_row16<F>(w.data + n * w.stride, num_blocks, x);
#else
        for (int64_t n = n0; n < n1; ++n) y[n] = dot_row<F>(w.data + n * w.stride, num_blocks, x);
#endif
        return;
    }
#ifdef TL_TILE16
    if (m < tile_min_m<F>()) return pair_rows<F>(w, x, m, y, n0, n1, ahead);
    RowDecode<F> strips(w);
    return tile_rows_strips(strips, w.k, x, m, y, w.n, n0, n1, ahead);  // x packed (matmul)
#elif defined(TL_SIMD)
    if (m >= tile_min_m<F>()) {
        auto decode = [&w](int64_t r0, int64_t r1, float* out) { decode_rows<F, true>(w, r0, r1, out, w.k); };
        tile_rows(decode, w.k, x, m, y, w.n, n0, n1, ahead);  // x packed (matmul)
        return;
    }
#endif
    for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* row = w.data + n * w.stride;
        for (int64_t m0 = 0; m0 < m;) {
            const float* xm = x + m0 * w.k;
            float* ym = y + m0 * w.n + n;
            const int64_t tile = std::min<int64_t>(ROW_TILE, m - m0);
            m0 += tile;
            switch (tile) {
                case 6: dot_row_m<F, ROW_TILE >= 6 ? 6 : 1>(row, num_blocks, xm, w.k, ym, w.n); break;
                case 5: dot_row_m<F, ROW_TILE >= 5 ? 5 : 1>(row, num_blocks, xm, w.k, ym, w.n); break;
                case 4: dot_row_m<F, ROW_TILE >= 4 ? 4 : 1>(row, num_blocks, xm, w.k, ym, w.n); break;
                case 3: dot_row_m<F, 3>(row, num_blocks, xm, w.k, ym, w.n); break;
                case 2: dot_row_m<F, 2>(row, num_blocks, xm, w.k, ym, w.n); break;
                default: dot_row_m<F, 1>(row, num_blocks, xm, w.k, ym, w.n); break;
            }
        }
    }
}

// Rows go to threads in chunks of whole units of 16 rows (no two threads write one cache line of y), cut by
// Chunks and claimed as threads come, so a thread the OS delays does not hold up the others.
constexpr int64_t UNIT_ROWS = 16;

Pool& pool() {
    static Pool* p = new Pool();  // never destroyed: see Pool
    return *p;
}

struct Job {
    const Weight* w;
    const float* x;
    int64_t m;
    float* y;
    Chunks chunks;  // of UNIT_ROWS rows
    Ahead* ahead = nullptr;

    int64_t row(int64_t c) const { return std::min(w->n, chunks.start[c] * UNIT_ROWS); }
};

template <int F> static void matmul_chunk(void* ctx, int64_t c) {
    const Job& j = *static_cast<const Job*>(ctx);
    AheadCursor ahead(j.ahead);
    rows_chunk<F>(*j.w, j.x, j.m, j.y, j.row(c), j.row(c + 1), j.ahead ? &ahead : nullptr);
}

template <int F> static void dequantize_chunk(void* ctx, int64_t c) {
    const Job& j = *static_cast<const Job*>(ctx);
    decode_rows<F>(*j.w, j.row(c), j.row(c + 1), j.y + j.row(c) * j.w->k, j.w->k);
}

static Job job_of(const Weight& w, const float* x, int64_t m, float* y, int threads) {
    return Job{&w, x, m, y, Chunks((w.n + UNIT_ROWS - 1) / UNIT_ROWS, threads)};
}

#ifdef TL_SIMD
// Rows of x packed for the tile (pack_row), on the pool's threads for many rows. A prompt chunk's activations are
// megabytes: packed on the caller alone they took long enough for the pool's helper to go to sleep, and waking
// it made it late for its chunk of the matmul (past 2^16 floats the pool packs them; docs/benchmarks.md).
struct PackJob {
    const float* x;
    float* out;
    int64_t m, k, chunks;
};

static void pack_chunk(void* ctx, int64_t c) {
    const PackJob& j = *static_cast<const PackJob*>(ctx);
    for (int64_t i = j.m * c / j.chunks; i < j.m * (c + 1) / j.chunks; ++i) pack_row(j.x + i * j.k, j.k, i, j.m, j.out);
}
#endif

template <int F>
static void matmul(const Weight& w, const float* x, int64_t m, float* y, int threads, Ahead* ahead = nullptr) {
#ifdef TL_SIMD
    if (m >= tile_min_m<F>()) {  // the tile kernel reads the activations packed (tile.h)
        static thread_local std::vector<float> xs;
        if ((int64_t)xs.size() < m * w.k) xs.resize(m * w.k);
        PackJob job{x, xs.data(), m, w.k, m * w.k >= (1 << 16) ? 2 * (int64_t)std::max(1, threads) : 1};
        pool().run(pack_chunk, &job, job.chunks, threads);
        x = xs.data();
    }
#endif
    Job job = job_of(w, x, m, y, threads);
    job.ahead = ahead;
    pool().run(matmul_chunk<F>, &job, job.chunks.count, threads);
}

template <int F> static void dequantize(const Weight& w, float* out, int threads) {
    Job job = job_of(w, nullptr, 0, out, threads);
    pool().run(dequantize_chunk<F>, &job, job.chunks.count, threads);
}

// Runs call(F) for the format id and returns 0, or returns -1 for an unknown id.
#define TL_DISPATCH_CASE(F, ...) case tl::F: TL_CALL(F); return 0;
#define TL_DISPATCH(fmt)                    \
    switch (fmt) {                          \
        TL_FORMATS(TL_DISPATCH_CASE)        \
        default: return -1;                 \
    }

}  // namespace tl

extern "C" {

// y[m, n] = x[m, k] @ W^T, asking for ahead's lines as it goes (ahead.h; null: none). Returns 0, or -1 for an
// unknown format id.
int tl_qmatmul_ahead(int fmt, const float* x, int64_t m, int64_t k, const uint8_t* data, int64_t n, int64_t stride,
                     float* y, int threads, tl::Ahead* ahead) {
    const tl::Weight w{data, n, k, stride};
#define TL_CALL(F) tl::matmul<tl::F>(w, x, m, y, threads, ahead)
    TL_DISPATCH(fmt)
#undef TL_CALL
}

// tl_qmatmul asking meanwhile for the lines of region [bytes], lines_per_mac a multiply-add (for tests).
int tl_qmatmul_asking(int fmt, const float* x, int64_t m, int64_t k, const uint8_t* data, int64_t n, int64_t stride,
                      float* y, int threads, const char* region, int64_t bytes, double lines_per_mac) {
    tl::RegionAhead r(region, bytes, lines_per_mac);
    return tl_qmatmul_ahead(fmt, x, m, k, data, n, stride, y, threads, &r.ahead);
}

// y[m, n] = x[m, k] @ W^T. Returns 0, or -1 for an unknown format id.
int tl_qmatmul(int fmt, const float* x, int64_t m, int64_t k, const uint8_t* data, int64_t n, int64_t stride,
               float* y, int threads) {
    return tl_qmatmul_ahead(fmt, x, m, k, data, n, stride, y, threads, nullptr);
}

// out[n, k] = the weight dequantized to float32.
int tl_dequantize(int fmt, const uint8_t* data, int64_t n, int64_t k, int64_t stride, float* out, int threads) {
    const tl::Weight w{data, n, k, stride};
#define TL_CALL(F) tl::dequantize<tl::F>(w, out, threads)
    TL_DISPATCH(fmt)
#undef TL_CALL
}

// The formats compiled in, a line each: "name type-id elements-per-block bytes-per-block" (formats/list.h).
const char* tl_formats() {
#define TL_FORMAT_LINE(name, id, block, bytes) #name " " #id " " #block " " #bytes "\n"
    return TL_FORMATS(TL_FORMAT_LINE);
#undef TL_FORMAT_LINE
}

// 1 when built with the AVX2/FMA kernels, 2 with the NEON ones, 0 for the portable scalar path.
int tl_simd() {
#if defined(TL_AVX2)
    return 1;
#elif defined(TL_NEON)
    return 2;
#else
    return 0;
#endif
}
}
