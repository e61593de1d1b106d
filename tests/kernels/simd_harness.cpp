// Runs the library's float matmul (tl_qmatmul) on the same pseudo-random weights and activations on any
// machine: every format, M in {1, ..., 9, 13, 64}, one and two threads. Writes every output float's bits to
// the file named by argv[1], so that builds for different instruction sets (AVX2, AVX-512, NEON under
// emulation) can be compared bit for bit, and prints tl_simd(). Exits 1 if a row of a batch differs from the same row computed alone.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "harness_random.h"

extern "C" int tl_simd();
extern "C" int tl_qmatmul(int fmt, const float* x, int64_t m, int64_t k, const uint8_t* data, int64_t n,
                          int64_t stride, float* y, int threads);

namespace {

struct Format {
    int id, block, bytes;
    std::vector<int> f16_at;   // offsets of the block's fp16 scales
    std::vector<int> e8m0_at;  // offsets of its E8M0 scales
};

const Format FORMATS[] = {
    {2, 32, 18, {0}, {}},     {3, 32, 20, {0, 2}, {}},     {6, 32, 22, {0}, {}},      {7, 32, 24, {0, 2}, {}},
    {8, 32, 34, {0}, {}},     {12, 256, 144, {0, 2}, {}},  {13, 256, 176, {0, 2}, {}}, {14, 256, 210, {208}, {}},
    {39, 32, 17, {}, {0}},
};

using harness::next;

uint16_t scale_f16() {  // a finite fp16 of magnitude 2^-10 .. 2^-5, either sign
    const uint16_t exp = 5 + next() % 5, man = next() % 1024;
    return (uint16_t)((next() & 0x8000) | (exp << 10) | man);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s OUT\n", argv[0]);
        return 2;
    }
    FILE* out = std::fopen(argv[1], "wb");
    if (!out) return 2;
    const int64_t n = 37;  // not a multiple of any chunk or tile
    const int64_t ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 64};
    int bad = 0;
    for (const Format& f : FORMATS) {
        for (int64_t k : {(int64_t)f.block, (int64_t)(f.block == 32 ? 96 : 512)}) {
            const int64_t stride = k / f.block * f.bytes;
            std::vector<uint8_t> w(n * stride);
            for (auto& b : w) b = (uint8_t)next();
            for (int64_t i = 0; i < n * k / f.block; ++i) {
                for (int at : f.f16_at) {
                    const uint16_t h = scale_f16();
                    std::memcpy(&w[i * f.bytes + at], &h, 2);
                }
                for (int at : f.e8m0_at) w[i * f.bytes + at] = (uint8_t)(118 + next() % 5);  // 2^-10 .. 2^-6
            }
            std::vector<float> x(64 * k);
            for (auto& v : x) v = (float)((int32_t)next()) / 2147483648.0f;
            std::vector<float> alone(64 * n);
            for (int64_t r = 0; r < 64; ++r)
                if (tl_qmatmul(f.id, x.data() + r * k, 1, k, w.data(), n, stride, alone.data() + r * n, 1) != 0) return 2;
            for (int threads : {1, 2})
                for (int64_t m : ms) {
                    std::vector<float> y(m * n);
                    tl_qmatmul(f.id, x.data(), m, k, w.data(), n, stride, y.data(), threads);
                    if (std::memcmp(y.data(), alone.data(), y.size() * 4) != 0) {
                        std::fprintf(stderr, "format %d k %lld m %lld threads %d: a row differs from the row alone\n",
                                     f.id, (long long)k, (long long)m, threads);
                        bad = 1;
                    }
                    std::fwrite(y.data(), 4, y.size(), out);
                }
        }
    }
    std::fclose(out);
    std::printf("simd %d\n", tl_simd());
    return bad;
}
