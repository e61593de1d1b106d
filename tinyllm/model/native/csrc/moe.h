// The mixture-of-experts MLP of a layer (LayerArgs::num_experts > 0), as tinyllm/model/moe.py computes it:
// the router scores each row's experts, a float32 softmax over all of them keeps the top_k most probable (equal
// probabilities: the lower index first), renormalised over the chosen where L.renormalize; the row then runs
// through its experts (gated MLPs: gate/up projection, SiLU or tanh-GELU, down projection) and its output is
// their outputs times their weights, summed in expert-index order.
//
// Rows are grouped by expert (llama.cpp's mul_mat_id does the same): each chosen expert's weights stream once
// for all the rows routed to it, through the kernels' quantized matmuls over those rows gathered. A row's
// result is the same bits whatever rows share the step: the matmuls give a row the same bits at any number of
// rows, the routing is per row, and each row's sum runs in expert-index order (experts are visited in index
// order and a row's chosen ones are ascending).
#pragma once
#include "layer_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace tl {

constexpr int64_t F32_ROWS = 0;  // GGML's type id of float32: a router kept as float rows

// logits [M, E] = h [M, C] @ router^T: float32 rows (one dot product a logit, the same bits at any M; the
// threads split the experts, as a decode step has one row) or a quantized weight through the kernels.
static void router_logits(const QW& r, const float* h, int64_t M, float* logits, int threads) {
    if (r.fmt != F32_ROWS) return matmul(r, h, M, logits, threads);
    for_rows(r.n, threads, [&](int64_t e0, int64_t e1) {
        for (int64_t e = e0; e < e1; ++e) {
            const float* w = reinterpret_cast<const float*>(r.data + e * r.stride);
            for (int64_t i = 0; i < M; ++i) logits[i * r.n + e] = dot(h + i * r.k, w, r.k);
        }
    });
}

// One row's routing: logits [E] -> chosen [k] ascending expert indices and their weights [k] (moe.py's route).
static void route_row(const float* logits, int64_t E, int64_t k, bool renormalize, int64_t* chosen, float* weight) {
    thread_local std::vector<float> p;
    thread_local std::vector<char> taken;
    p.resize(E);
    taken.assign(E, 0);
    float max = -std::numeric_limits<float>::infinity(), sum = 0.0f;
    for (int64_t e = 0; e < E; ++e) max = std::max(max, logits[e]);
    for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(logits[e] - max));
    for (int64_t e = 0; e < E; ++e) p[e] /= sum;
    for (int64_t j = 0; j < k; ++j) {  // the most probable left, the lower index among equals
        int64_t best = -1;
        for (int64_t e = 0; e < E; ++e)
            if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
        taken[best] = 1;
        chosen[j] = best;
        weight[j] = p[best];
    }
    if (renormalize) {
        float total = 0.0f;
        for (int64_t j = 0; j < k; ++j) total += weight[j];  // in rank order
        for (int64_t j = 0; j < k; ++j) weight[j] /= total;
    }
    for (int64_t j = 1; j < k; ++j)  // into expert-index order, each weight with its expert
        for (int64_t i = j; i > 0 && chosen[i - 1] > chosen[i]; --i) {
            std::swap(chosen[i - 1], chosen[i]);
            std::swap(weight[i - 1], weight[i]);
        }
}

// chosen [M k] (row i's slots at i k ..) -> picks [M k]: the entries p = i k + slot of expert e at
// picks[start[e]..start[e + 1]), rows ascending (a counting sort).
static void group_by_expert(const std::vector<int64_t>& chosen, int64_t E, std::vector<int64_t>& start,
                            std::vector<int64_t>& picks) {
    const int64_t count = (int64_t)chosen.size();
    start.assign(E + 1, 0);
    for (int64_t p = 0; p < count; ++p) ++start[chosen[p] + 1];
    for (int64_t e = 0; e < E; ++e) start[e + 1] += start[e];
    thread_local std::vector<int64_t> at;
    at.assign(start.begin(), start.end() - 1);
    picks.resize(count);
    for (int64_t p = 0; p < count; ++p) picks[at[chosen[p]]++] = p;
}

// out [M, C] = the experts' weighted outputs for rows h [M, C] (the MLP's input, normed).
static void moe(const LayerArgs& L, const float* h, int64_t M, int64_t C, float* out, int threads,
                Ahead* ahead) {
    const int64_t E = L.num_experts, k = L.top_k;
    int64_t inter = 0;  // the widest expert's Ie
    for (int64_t e = 0; e < E; ++e) inter = std::max(inter, L.experts_down[e].k);
    thread_local std::vector<float> buf;
    thread_local std::vector<int64_t> chosen, picks, start;
    buf.resize(M * (E + k + 2 * C + 5 * inter));
    float* logits = buf.data();      // [M, E]
    float* weight = logits + M * E;  // [M, k]
    float* xe = weight + M * k;      // [n_e, C]: the rows routed to expert e, gathered
    float* gu = xe + M * C;          // [n_e, 2 Ie]
    float* part = gu + 2 * M * inter;  // [n_e, 2 Ie]: a part of a gate/up stored in two
    float* act = part + 2 * M * inter;  // [n_e, Ie]
    float* ye = act + M * inter;     // [n_e, C]
    chosen.resize(M * k);
    router_logits(L.router, h, M, logits, threads);
    for (int64_t i = 0; i < M; ++i) route_row(logits + i * E, E, k, L.renormalize != 0, &chosen[i * k], weight + i * k);
    group_by_expert(chosen, E, start, picks);
    for (int64_t e = 0; e < E; ++e) {
        const int64_t n = start[e + 1] - start[e], Ie = L.experts_down[e].k;
        if (n == 0) continue;
        const int64_t* mine = &picks[start[e]];
        for (int64_t r = 0; r < n; ++r) std::copy(h + mine[r] / k * C, h + (mine[r] / k + 1) * C, xe + r * C);
        matmul(L.experts_gate_up[e], xe, n, gu, part, threads, ahead);
        for_rows(n, threads, [&](int64_t r0, int64_t r1) {
            (L.activation == 1 ? gelu_mul : silu_mul)(gu + r0 * 2 * Ie, r1 - r0, Ie, act + r0 * Ie);
        });
        matmul(L.experts_down[e], act, n, ye, threads, ahead);
        for (int64_t r = 0; r < n; ++r) {  // a row's first expert sets it, each later one adds (no fused multiply-add)
            const float w = weight[mine[r]];
            float* o = out + mine[r] / k * C;
            const float* y = ye + r * C;
            if (mine[r] % k == 0)
                for (int64_t c = 0; c < C; ++c) o[c] = y[c] * w;
            else
                for (int64_t c = 0; c < C; ++c) o[c] = o[c] + y[c] * w;
        }
    }
}

}  // namespace tl
