// Q5_1: 32 elements in 24 bytes: d and m, a word of fifth bits, then 16 bytes of nibbles (block32.h).
#pragma once
#include "block32.h"

namespace tl {

template <> struct Format<Q5_1> : Block32<true, true> {};

}  // namespace tl
