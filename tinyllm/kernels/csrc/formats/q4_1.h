// Q4_1: 32 elements in 20 bytes: d and m, then 16 bytes of nibbles (block32.h).
#pragma once
#include "block32.h"

namespace tl {
namespace {  // internal linkage, as static functions: GCC inlines them as it did those

template <> struct Format<Q4_1> : Block32<true, false> {
    static constexpr int tile_min_m = 10;  // its pair_rows keeps up with the tile until then
};

}  // namespace
}  // namespace tl
