// How many float32 multiply-adds a second the cores deliver right now: each thread runs independent chains of
// FMAs as wide as the kernels' (16 lanes with AVX-512, else 8) on registers only (no memory traffic), for the
// given time: the rate a float32 engine's floor is measured against. A benchmark records it beside its
// figures, because on a shared or virtual machine the cores' rate moves between runs: two cores whose host runs
// other work on their sibling hardware threads give about half their FMAs.
#include "tile.h"  // TL_TILE16: the float kernels run 16-lane FMAs

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace tl {

#ifdef TL_TILE16
#define TL_FMA_LANES 16
#elif defined(TL_SIMD)
#define TL_FMA_LANES 8
#else
#define TL_FMA_LANES 1
#endif

#if TL_FMA_LANES == 16
// `rounds` rounds of the 12 chains, in registers: out of line, so the clock's calls around it (every vector
// register is the caller's to save) do not keep the chains in memory.
__attribute__((noinline)) static void fma_rounds16(__m512* a, int64_t rounds) {
    const __m512 b = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(0.0001f);
    __m512 r[12];
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) r[i] = a[i];
    for (int64_t n = 0; n < rounds; ++n)
#pragma GCC unroll 12
        for (int i = 0; i < 12; ++i) {
            r[i] = _mm512_fmadd_ps(r[i], b, c);
            asm("" : "+v"(r[i]));  // every FMA done
        }
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = r[i];
}
#endif

// Rounds of 12 chains of FMAs until `seconds` have passed; the multiply-adds done (TL_FMA_LANES per FMA).
static double fma_loop(double seconds) {
    using clock = std::chrono::steady_clock;
    const auto end = clock::now() + std::chrono::duration<double>(seconds);
    constexpr int64_t ROUNDS = 1 << 16;
    double done = 0.0;
#if TL_FMA_LANES == 16
    __m512 a[12];
    for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(0.001f * (float)i);
    while (clock::now() < end) {
        fma_rounds16(a, ROUNDS);
        done += ROUNDS * 12.0 * 16.0;
    }
    volatile float keep = _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[11]));
    (void)keep;
#elif TL_FMA_LANES == 8
    V8 a[12];
    for (int i = 0; i < 12; ++i) a[i] = v8_set1(0.001f * (float)i);
    const V8 b = v8_set1(0.9999f), c = v8_set1(0.0001f);
    while (clock::now() < end) {
        for (int64_t r = 0; r < ROUNDS; ++r)
            for (int i = 0; i < 12; ++i) a[i] = in_register(v8_fma(a[i], b, c));
        done += ROUNDS * 12.0 * 8.0;
    }
    float sink[8];
    v8_store(sink, v8_add(a[0], a[11]));
    volatile float keep = sink[0];
    (void)keep;
#else
    volatile float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    while (clock::now() < end) {
        for (int64_t r = 0; r < ROUNDS / 8; ++r)
            for (int i = 0; i < 8; ++i) a[i] = a[i] * 0.9999f + 0.0001f;
        done += ROUNDS;
    }
#endif
    return done;
}

}  // namespace tl

extern "C" {

// The lanes of the probe's FMAs: 16 where the kernels run 16-lane FMAs (AVX-512), 8 (AVX2, NEON), 1 (scalar).
int tl_fma_lanes() { return TL_FMA_LANES; }

// Multiply-adds a second (all threads together) of `threads` threads each running FMAs for `seconds`; -1 for
// threads < 1 or seconds <= 0.
double tl_fma_rate(int threads, double seconds) {
    if (threads < 1 || !(seconds > 0.0)) return -1.0;
    std::vector<double> done(threads, 0.0);
    std::vector<std::thread> helpers;
    const auto start = std::chrono::steady_clock::now();
    for (int t = 1; t < threads; ++t) helpers.emplace_back([&done, t, seconds] { done[t] = tl::fma_loop(seconds); });
    done[0] = tl::fma_loop(seconds);
    for (auto& h : helpers) h.join();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double total = 0.0;
    for (double d : done) total += d;
    return total / elapsed;
}
}
