// Runs the native decode step (tl_decode_layers) of a small pseudo-random model on any machine: two layers of
// mixed block formats, a prompt step holding two sequences' prompts (one longer than an attention span) and
// three decode steps of both, for each KV element type, with SiLU and with GELU, with float and with 8-bit
// activations; then the greedy sampler's pass
// over a few rows of logits. Writes the bits of the hidden states after every step and of the sampler's results
// to the file named by argv[1] and prints tl_simd(), so that builds for different instruction sets (AVX2,
// AVX-512, NEON under emulation) can be compared bit for bit. No soft-cap: its tanh is libm's, which x86-64's
// and aarch64's glibc round differently (the step's other libm calls, expf in joining spans and cosf/sinf for
// the rotary angles, agree on these inputs).
#include "../../tinyllm/model/native/csrc/decode.cpp"  // built with -I tinyllm/kernels/csrc and step_args.h

#include <cstdio>
#include <vector>

#include "harness_random.h"

extern "C" int tl_simd();
extern "C" int64_t tl_q8_packed_bytes(int fmt, int64_t n, int64_t k);
extern "C" int tl_q8_pack(int fmt, const uint8_t* data, int64_t n, int64_t k, int64_t stride, uint8_t* out, int threads);
extern "C" int64_t tl_greedy_rows(const float* logits, int64_t b, int64_t v, int64_t* token, double* logprob,
                                  double* entropy, int threads);

namespace {

using harness::next;
using harness::uniform;

struct Format {
    int id, block, bytes;
    std::vector<int> f16_at;
    std::vector<int> e8m0_at = {};
};
const Format Q8_0{8, 32, 34, {0}}, Q4_1{3, 32, 20, {0, 2}}, Q4_K{12, 256, 144, {0, 2}}, Q6_K{14, 256, 210, {208}};
const Format MXFP4{39, 32, 17, {}, {0}};

// A weight [n, k] of random blocks with small finite scales.
tl::QW weight(const Format& f, int64_t n, int64_t k, std::vector<std::vector<uint8_t>>& keep) {
    const int64_t stride = k / f.block * f.bytes;
    keep.emplace_back(n * stride);
    std::vector<uint8_t>& w = keep.back();
    for (auto& b : w) b = (uint8_t)next();
    for (int64_t i = 0; i < n * k / f.block; ++i) {
        for (int at : f.f16_at) {
            const uint16_t h = (uint16_t)((next() & 0x8000) | ((3 + next() % 4) << 10) | (next() % 1024));
            std::memcpy(&w[i * f.bytes + at], &h, 2);
        }
        for (int at : f.e8m0_at) w[i * f.bytes + at] = (uint8_t)(116 + next() % 4);  // 2^-12 .. 2^-9
    }
    return tl::QW{f.id, w.data(), stride, n, k};
}

std::vector<float> values(int64_t n, float center, float spread) {
    std::vector<float> v(n);
    for (auto& x : v) x = center + spread * uniform();
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    FILE* out = std::fopen(argv[1], "wb");
    if (!out) return 2;
    const int64_t L = 2, C = 256, H = 4, KV = 2, D = 64, I = 512, slots_per_seq = 96;
    std::vector<std::vector<uint8_t>> keep;
    std::vector<std::vector<float>> floats;
    std::vector<tl::LayerArgs> layers(L);
    for (int64_t l = 0; l < L; ++l) {
        tl::LayerArgs& la = layers[l];
        la = tl::LayerArgs{};
        floats.push_back(values(C, 1.0f, 0.5f));
        la.attn_norm = floats.back().data();
        floats.push_back(values(C, 1.0f, 0.5f));
        la.mlp_norm = floats.back().data();
        la.qkv = tl::Proj{{weight(Q8_0, (H + 2 * KV) * D, C, keep)}, 1};
        la.o = weight(l == 0 ? Q4_1 : MXFP4, C, H * D, keep);
        la.gate_up = tl::Proj{{weight(Q4_K, I, C, keep), weight(Q8_0, I, C, keep)}, 2};
        la.down = weight(Q6_K, C, I, keep);
    }
    // the same weights packed for 8-bit activations (fmt | INT8_ACTIVATIONS)
    std::vector<tl::LayerArgs> layers8 = layers;
    auto pack = [&](tl::QW& w) {
        keep.emplace_back(tl_q8_packed_bytes((int)w.fmt, w.n, w.k));
        if (tl_q8_pack((int)w.fmt, w.data, w.n, w.k, w.stride, keep.back().data(), 1) != 0) std::exit(2);
        w = tl::QW{w.fmt | tl::INT8_ACTIVATIONS, keep.back().data(), 0, w.n, w.k};
    };
    for (auto& la : layers8) {
        for (int64_t i = 0; i < la.qkv.count; ++i) pack(la.qkv.part[i]);
        for (int64_t i = 0; i < la.gate_up.count; ++i) pack(la.gate_up.part[i]);
        pack(la.o);
        pack(la.down);
    }
    std::vector<float> inv_freq(D / 2);
    for (int64_t j = 0; j < D / 2; ++j) inv_freq[j] = std::pow(10000.0f, -2.0f * j / D);
    const int64_t configs[][3] = {{tl::KV_F32, 0, 0}, {tl::KV_F32, 1, 0}, {tl::KV_F16, 0, 0}, {tl::KV_F16, 1, 0},
                                  {tl::KV_BF16, 0, 0}, {tl::KV_BF16, 1, 0}, {tl::KV_F32, 0, 1}, {tl::KV_F16, 1, 1},
                                  {tl::KV_Q8, 0, 0}, {tl::KV_Q8, 1, 1}};
    for (const auto& config : configs) {
        const int64_t kv_type = config[0], activation = config[1];
        std::vector<tl::LayerArgs>& run = config[2] ? layers8 : layers;
        const int64_t elem = kv_type == tl::KV_F32 ? 4 : kv_type == tl::KV_Q8 ? 1 : 2, values_n = 2 * slots_per_seq * KV * D;
        std::vector<std::vector<uint8_t>> caches;
        for (auto& la : run) {
            caches.emplace_back(values_n * elem, 0);
            la.k_cache = caches.back().data();
            caches.emplace_back(values_n * elem, 0);
            la.v_cache = caches.back().data();
            la.k_scale = la.v_scale = nullptr;
            if (kv_type != tl::KV_Q8) continue;
            caches.emplace_back(values_n / tl::Q8_BLOCK * 2, 0);  // float16 scales
            la.k_scale = caches.back().data();
            caches.emplace_back(values_n / tl::Q8_BLOCK * 2, 0);
            la.v_scale = caches.back().data();
        }
        for (auto& la : run) {
            la.activation = activation;
            la.scale = 0.125;
            la.softcap = 0.0;
        }
        tl::ModelArgs md{L, C, H, KV, D, I, D, 1e-5, run.data(), {inv_freq.data(), nullptr}, kv_type};
        // step 0: prompts of 70 and 5 tokens; steps 1-3: one new token for each sequence
        const int64_t lens[2] = {70, 5}, smax = 80;
        std::vector<int64_t> key_slots(2 * smax);
        for (int64_t s = 0; s < 2; ++s)
            for (int64_t p = 0; p < smax; ++p) key_slots[s * smax + p] = s * slots_per_seq + p;
        for (int step = 0; step < 4; ++step) {
            std::vector<int64_t> positions, write_slots, key_rows;
            for (int64_t s = 0; s < 2; ++s) {
                const int64_t from = step == 0 ? 0 : lens[s] + step - 1, to = step == 0 ? lens[s] : from + 1;
                for (int64_t p = from; p < to; ++p) {
                    positions.push_back(p);
                    write_slots.push_back(s * slots_per_seq + p);
                    key_rows.push_back(s);
                }
            }
            const int64_t n = (int64_t)positions.size();
            std::vector<float> x = values(n * C, 0.0f, 1.0f);
            std::vector<float> scratch(tl_decode_scratch_floats(&md, n, smax));
            tl::StepArgs st{n, positions.data(), write_slots.data(), key_slots.data(), key_rows.data(), smax,
                            scratch.data(), 2, nullptr};
            if (tl_decode_layers(&md, &st, x.data()) != 0) return 2;
            std::fwrite(x.data(), 4, x.size(), out);
        }
    }
    // the greedy sampler's pass over rows of logits (some -inf): token, log-probability, entropy
    const int64_t rows = 3, vocab = 1003;
    std::vector<float> logits = values(rows * vocab, 0.0f, 8.0f);
    for (int64_t i = 0; i < rows * vocab; i += 7) logits[i] = -INFINITY;
    std::vector<int64_t> token(rows);
    std::vector<double> logprob(rows), entropy(rows);
    if (tl_greedy_rows(logits.data(), rows, vocab, token.data(), logprob.data(), entropy.data(), 2) != 0) return 2;
    std::fwrite(token.data(), 8, rows, out);
    std::fwrite(logprob.data(), 8, rows, out);
    std::fwrite(entropy.data(), 8, rows, out);
    std::fclose(out);
    std::printf("simd %d\n", tl_simd());
    return 0;
}
