// Q4_0: 32 elements in 18 bytes: d, then 16 bytes of nibbles (block32.h).
#pragma once
#include "block32.h"

namespace tl {
namespace {  // internal linkage, as static functions: GCC inlines them as it did those

template <> struct Format<Q4_0> : Block32<false, false> {};

}  // namespace
}  // namespace tl
