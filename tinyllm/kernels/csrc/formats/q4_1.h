// Q4_1: 32 elements in 20 bytes: d and m, then 16 bytes of nibbles (block32.h).
#pragma once
#include "block32.h"

namespace tl {

template <> struct Format<Q4_1> : Block32<true, false> {};

}  // namespace tl
