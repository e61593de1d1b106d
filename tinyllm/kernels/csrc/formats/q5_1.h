// Q5_1: 32 elements in 24 bytes: d and m, a word of fifth bits, then 16 bytes of nibbles (block32.h).
#pragma once
#include "block32.h"

namespace tl {
namespace {  // internal linkage, as static functions: GCC inlines them as it did those

template <> struct Format<Q5_1> : Block32<true, true> {
    static constexpr int rows_at_m1 = 1;  // no table: FMAs in its decode, slower several rows at once
};

}  // namespace
}  // namespace tl
