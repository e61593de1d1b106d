// Q5_0: 32 elements in 22 bytes: d, a word of fifth bits, then 16 bytes of nibbles (block32.h).
#pragma once
#include "block32.h"

namespace tl {
namespace {  // internal linkage, as static functions: GCC inlines them as it did those

template <> struct Format<Q5_0> : Block32<false, true> {};

}  // namespace
}  // namespace tl
