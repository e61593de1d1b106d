// Vector math shared by the kernels: e^x as a polynomial (the portable paths use std::exp). The horizontal sum
// and in_register are in simd.h.
#pragma once
#include "blocks.h"

namespace tl {

#ifdef TL_SIMD
// e^x for x in [-88, 88] (clamped), a degree-6 polynomial after x = n ln2 + r: within 2 ulp of expf. The same
// operations on AVX2 and NEON, so the same bits.
static inline V8 exp8(V8 x) {
    x = v8_min(v8_max(x, v8_set1(-87.0f)), v8_set1(88.0f));
    const V8 n = v8_round(v8_mul(x, v8_set1(1.44269504088896341f)));
    V8 r = v8_fnma(n, v8_set1(0.693359375f), x);  // ln2 in two parts: r stays exact
    r = v8_fnma(n, v8_set1(-2.12194440e-4f), r);
    V8 p = v8_set1(1.9875691500e-4f);
    p = v8_fma(p, r, v8_set1(1.3981999507e-3f));
    p = v8_fma(p, r, v8_set1(8.3334519073e-3f));
    p = v8_fma(p, r, v8_set1(4.1665795894e-2f));
    p = v8_fma(p, r, v8_set1(1.6666665459e-1f));
    p = v8_fma(p, r, v8_set1(5.0000001201e-1f));
    p = v8_fma(p, v8_mul(r, r), v8_add(r, v8_set1(1.0f)));
    return v8_mul(p, v8_exp2i(n));
}
#endif


}  // namespace tl
