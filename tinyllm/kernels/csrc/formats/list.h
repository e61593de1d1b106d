// The GGUF block formats the kernels run, one line each: X(name, GGML type id, elements per block, bytes per
// block). Every switch over formats expands this list (the type id is what Python passes, kernels/formats.py's
// ggml_type; tests/kernels/test_formats.py checks the two tables agree). Each format's decode is a
// specialisation of Format<F> in its own header, included below; a new format is a line here, its include and
// its header.
#pragma once

#define TL_FORMATS(X)     \
    X(Q4_0, 2, 32, 18)    \
    X(Q4_1, 3, 32, 20)    \
    X(Q5_0, 6, 32, 22)    \
    X(Q5_1, 7, 32, 24)    \
    X(Q8_0, 8, 32, 34)    \
    X(Q4_K, 12, 256, 144) \
    X(Q5_K, 13, 256, 176) \
    X(Q6_K, 14, 256, 210) \
    X(MXFP4, 39, 32, 17)

namespace tl {

#define TL_FORMAT_ID(name, id, block, bytes) name = id,
enum Fmt { TL_FORMATS(TL_FORMAT_ID) };
#undef TL_FORMAT_ID

template <int F> struct Traits;
#define TL_FORMAT_TRAITS(name, id, elements, size) \
    template <> struct Traits<name> { static constexpr int block = elements, bytes = size; };
TL_FORMATS(TL_FORMAT_TRAITS)
#undef TL_FORMAT_TRAITS

namespace {
template <int F> struct Format;  // each format's decode (base.h lists what it provides)
}

}  // namespace tl

#include "q4_0.h"
#include "q4_1.h"
#include "q5_0.h"
#include "q5_1.h"
#include "q8_0.h"
#include "q4_k.h"
#include "q5_k.h"
#include "q6_k.h"
#include "mxfp4.h"
