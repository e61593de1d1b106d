// The decode step's row-wise layer operations: dot products, RMSNorm, the projections (quantized matmuls over
// a projection's parts, with or without 8-bit activations), rotary embedding and the KV store, the gated
// activations (SiLU, tanh-GELU), residual adds and per-head q/k norms. Each row's result does not depend on how
// rows are split over threads.
#pragma once
#include "ahead.h"
#include "decode_args.h"
#include "kv.h"
#include "pool.h"
#include "q8act.h"
#include "vmath.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

extern "C" int tl_qmatmul_ahead(int fmt, const float* x, int64_t m, int64_t k, const uint8_t* data, int64_t n,
                                int64_t stride, float* y, int threads, tl::Ahead* ahead);
extern "C" int tl_dequantize(int fmt, const uint8_t* data, int64_t n, int64_t k, int64_t stride, float* out,
                             int threads);

namespace tl {

template <class P> static inline float dot(const float* a, P b, int64_t d) {  // P: a float or KV pointer
    int64_t i = 0;
    float s = 0.0f;
#ifdef TL_SIMD
    V8 acc0 = v8_zero(), acc1 = v8_zero();
    for (; i + 16 <= d; i += 16) {
        acc0 = v8_fma(v8_load(a + i), load8(b + i), acc0);
        acc1 = v8_fma(v8_load(a + i + 8), load8(b + i + 8), acc1);
    }
    for (; i + 8 <= d; i += 8) acc0 = v8_fma(v8_load(a + i), load8(b + i), acc0);
    s = hsum(v8_add(acc0, acc1));
#endif
    for (; i < d; ++i) s += a[i] * load1(b + i);
    return s;
}

template <class P> static inline void axpy(float* y, float a, P x, int64_t d) {  // y += a * x
    int64_t i = 0;
#ifdef TL_SIMD
    const V8 av = v8_set1(a);
    for (; i + 8 <= d; i += 8) v8_store(y + i, v8_fma(av, load8(x + i), v8_load(y + i)));
#endif
    for (; i < d; ++i) y[i] += a * load1(x + i);
}

// p[j] = e^(p[j] - max) in place; returns their sum.
static float exp_shifted(float* p, int64_t s, float max) {
    int64_t j = 0;
    float sum = 0.0f;
#ifdef TL_SIMD
    const V8 m = v8_set1(max);
    V8 acc = v8_zero();
    for (; j + 8 <= s; j += 8) {
        const V8 e = exp8(v8_sub(v8_load(p + j), m));
        v8_store(p + j, e);
        acc = v8_add(acc, e);
    }
    sum = hsum(acc);
#endif
    for (; j < s; ++j) sum += (p[j] = std::exp(p[j] - max));
    return sum;
}

// out[c] = x[c] / sqrt(mean(x^2) + eps) * w[c] for each of n rows of c.
static void rms_norm(const float* x, const float* w, int64_t n, int64_t c, double eps, float* out) {
    for (int64_t r = 0; r < n; ++r) {
        const float* xr = x + r * c;
        const float inv = 1.0f / std::sqrt(dot(xr, xr, c) / (float)c + (float)eps);
        for (int64_t i = 0; i < c; ++i) out[r * c + i] = (xr[i] * inv) * w[i];
    }
}

// f(r0, r1) over rows 0..n in chunks on the pool's threads, or on the caller alone for a few rows (waking a
// helper costs more than they do). Row-wise work only: a row's result does not depend on the split.
constexpr int64_t ROWS_PER_TASK = 8;

template <class F> static void for_rows(int64_t n, int threads, F&& f) {
    if (threads <= 1 || n < 2 * ROWS_PER_TASK) return f(int64_t(0), n);
    struct Ctx {
        F* f;
        int64_t n, chunks;
    } ctx{&f, n, std::min<int64_t>(4 * threads, n / ROWS_PER_TASK)};
    auto chunk = [](void* c, int64_t i) {
        const Ctx& t = *static_cast<const Ctx*>(c);
        (*t.f)(t.n * i / t.chunks, t.n * (i + 1) / t.chunks);
    };
    pool().run(chunk, &ctx, ctx.chunks, threads);
}

// `a`: x quantized to 8 bits (a projection's parts share it), or null where no part takes 8-bit activations.
// `ahead`: lines for the float32 kernels to ask for as they go (ahead.h), or null.
static void matmul(const QW& w, const float* x, const Q8Act* a, int64_t m, float* y, int threads,
                   Ahead* ahead = nullptr) {
    if (w.fmt & INT8_ACTIVATIONS)
        q8_matmul((int)(w.fmt & 255), *a, w.data, w.n, y, threads);  // a's limbs: w's (one mode a model)
    else
        tl_qmatmul_ahead((int)w.fmt, x, m, w.k, w.data, w.n, w.stride, y, threads, ahead);
}

// The 8-bit rows per activation row for w: 1, or 3 for 24-bit activations.
static int64_t limbs(const QW& w) { return w.fmt & INT24_ACTIVATIONS ? 3 : 1; }

static void matmul(const QW& w, const float* x, int64_t m, float* y, int threads, Ahead* ahead = nullptr) {
    if (!(w.fmt & INT8_ACTIVATIONS)) return matmul(w, x, nullptr, m, y, threads, ahead);
    const Q8Act a = q8_quantize(x, m, w.k, threads, limbs(w));
    matmul(w, x, &a, m, y, threads, ahead);
}

// y [m, sum of the parts' rows] = x @ [part 0; part 1; ...]^T; several parts go through `part` [m, rows].
static void matmul(const Proj& p, const float* x, int64_t m, float* y, float* part, int threads,
                   Ahead* ahead = nullptr) {
    if (p.count == 1) return matmul(p.part[0], x, m, y, threads, ahead);
    int64_t width = 0, at = 0;
    bool int8 = false;
    for (int64_t i = 0; i < p.count; ++i) width += p.part[i].n, int8 |= (p.part[i].fmt & INT8_ACTIVATIONS) != 0;
    Q8Act a{};
    if (int8) a = q8_quantize(x, m, p.part[0].k, threads, limbs(p.part[0]));
    for (int64_t i = 0; i < p.count; ++i) {
        const QW& w = p.part[i];
        matmul(w, x, &a, m, part, threads, ahead);
        for_rows(m, threads, [&](int64_t r0, int64_t r1) {  // on the pool: see PackJob in qmatmul.cpp
            for (int64_t r = r0; r < r1; ++r) std::copy(part + r * w.n, part + (r + 1) * w.n, y + r * width + at);
        });
        at += w.n;
    }
}

// Rotate the first R dims of each q and k head of tokens i0..i1 by their positions' angles (pair i, i + R/2:
// (a, b) -> (a cos - b sin, b cos + a sin)), then store k and v at each token's slot.
template <class T>
static void rope_store(const ModelArgs& md, const LayerArgs& L, const StepArgs& st, const float* trig, float* qkv,
                       int64_t i0, int64_t i1) {
    const int64_t D = md.head_dim, half = md.rotary_dim / 2, width = (md.heads + 2 * md.kv_heads) * D;
    const int64_t kv_row = md.kv_heads * D;
    for (int64_t i = i0; i < i1; ++i) {
        const float* cs = trig + (L.rope * st.n + i) * 2 * half;
        const float* sn = cs + half;
        float* row = qkv + i * width;
        for (int64_t h = 0; h < md.heads + md.kv_heads; ++h) {
            float* v = row + h * D;
            for (int64_t j = 0; j < half; ++j) {
                const float a = v[j], b = v[j + half];
                v[j] = a * cs[j] - b * sn[j];
                v[j + half] = b * cs[j] + a * sn[j];
            }
        }
        store_row<T>(row + md.heads * D, kv_row, L.k_cache, L.k_scale, st.write_slots[i] * kv_row);
        store_row<T>(row + md.heads * D + kv_row, kv_row, L.v_cache, L.v_scale, st.write_slots[i] * kv_row);
    }
}

// trig [tables, N, 2, R/2]: cos and sin of each token's angles (position * inv_freq[j], in float32 as
// model/rope.py) per rotary table, made once per step for all the layers.
static void rotary_angles(const ModelArgs& md, const StepArgs& st, float* trig) {
    const int64_t half = md.rotary_dim / 2;
    for (int64_t t = 0; t < 2 && md.inv_freq[t]; ++t)
        for (int64_t i = 0; i < st.n; ++i) {
            const float pos = (float)st.positions[i];
            float* cs = trig + (t * st.n + i) * 2 * half;
            for (int64_t j = 0; j < half; ++j) {
                const float angle = pos * md.inv_freq[t][j];
                cs[j] = std::cos(angle);
                cs[half + j] = std::sin(angle);
            }
        }
}

// act[i] = silu(gate[i]) * up[i] = gate / (1 + e^-gate) * up, for each of n rows of [gate | up].
static void silu_mul(const float* gu, int64_t n, int64_t inter, float* act) {
    for (int64_t r = 0; r < n; ++r) {
        const float* g = gu + r * 2 * inter;
        const float* u = g + inter;
        float* a = act + r * inter;
        int64_t i = 0;
#ifdef TL_SIMD
        const V8 one = v8_set1(1.0f);
        for (; i + 8 <= inter; i += 8) {
            const V8 gv = v8_load(g + i);
            const V8 e = exp8(v8_sub(v8_zero(), gv));
            v8_store(a + i, v8_mul(v8_div(gv, v8_add(one, e)), v8_load(u + i)));
        }
#endif
        for (; i < inter; ++i) a[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    }
}

// act[i] = gelu(gate[i]) * up[i] with gelu(g) = g / 2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), tanh(y) written
// as (1 - e^-2|y|) / (1 + e^-2|y|) with y's sign.
static void gelu_mul(const float* gu, int64_t n, int64_t inter, float* act) {
    const float c = 0.7978845608028654f, k = 0.044715f;
    for (int64_t r = 0; r < n; ++r) {
        const float* g = gu + r * 2 * inter;
        const float* u = g + inter;
        float* a = act + r * inter;
        int64_t i = 0;
#ifdef TL_SIMD
        const V8 one = v8_set1(1.0f), half = v8_set1(0.5f);
        for (; i + 8 <= inter; i += 8) {
            const V8 gv = v8_load(g + i);
            const V8 y = v8_mul(v8_set1(c), v8_add(gv, v8_mul(v8_set1(k), v8_mul(gv, v8_mul(gv, gv)))));
            const V8 e = exp8(v8_mul(v8_set1(-2.0f), v8_abs(y)));
            const V8 t = v8_copysign(v8_div(v8_sub(one, e), v8_add(one, e)), y);
            const V8 gelu = v8_mul(v8_mul(half, gv), v8_add(one, t));
            v8_store(a + i, v8_mul(gelu, v8_load(u + i)));
        }
#endif
        for (; i < inter; ++i) a[i] = 0.5f * g[i] * (1.0f + std::tanh(c * (g[i] + k * g[i] * g[i] * g[i]))) * u[i];
    }
}

static void add_into(float* x, const float* y, int64_t count) {
    for (int64_t i = 0; i < count; ++i) x[i] += y[i];
}

// Per-head RMSNorm of the q heads (L.q_norm) and k heads (L.k_norm) of tokens i0..i1's q/k/v rows, in place;
// a null norm leaves its heads as they are.
static void qk_norm(const ModelArgs& md, const LayerArgs& L, int64_t i0, int64_t i1, float* qkv) {
    const int64_t D = md.head_dim, width = (md.heads + 2 * md.kv_heads) * D;
    for (int64_t i = i0; i < i1; ++i) {
        if (L.q_norm) rms_norm(qkv + i * width, L.q_norm, md.heads, D, md.eps, qkv + i * width);
        if (L.k_norm)
            rms_norm(qkv + i * width + md.heads * D, L.k_norm, md.kv_heads, D, md.eps, qkv + i * width + md.heads * D);
    }
}

}  // namespace tl
