// The native decode step's arguments: the structs (a quantized weight, a projection, one layer's, the model's and
// one step's arguments) are written at build time from tinyllm/model/native/step_fields.py into step_args.h,
// whose rows step_structs.py also mirrors with ctypes; here the flags of a weight's type id and the per-phase clock.
#pragma once
#include <chrono>
#include <cstdint>

#include "step_args.h"

namespace tl {

constexpr int64_t INT8_ACTIVATIONS = 256;  // or'ed into QW::fmt: 8-bit activations, data packed (q8act.h)
constexpr int64_t INT24_ACTIVATIONS = 512;  // and this too: 24-bit activations (three 8-bit limbs, q8act.h)

// Adds the time since the last mark to one phase of st.timings (a no-op when timings are off).
struct Clock {
    int64_t* timings;
    std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
    enum Phase { MATMUL = 0, ATTENTION = 1, OTHER = 2 };
    void mark(Phase p) {
        if (!timings) return;
        const auto now = std::chrono::steady_clock::now();
        timings[p] += std::chrono::duration_cast<std::chrono::nanoseconds>(now - last).count();
        last = now;
    }
};

}  // namespace tl
