// Q5_0: 32 elements in 22 bytes: d, a word of fifth bits, then 16 bytes of nibbles (block32.h).
#pragma once
#include "block32.h"

namespace tl {

template <> struct Format<Q5_0> : Block32<false, true> {};

}  // namespace tl
