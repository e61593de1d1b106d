// The harnesses' pseudo-random numbers (xorshift64*): the same sequence on every machine and compiler.
#pragma once
#include <cstdint>

namespace harness {

inline uint64_t state = 0x9E3779B97F4A7C15ull;

inline uint32_t next() {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return (uint32_t)((state * 0x2545F4914F6CDD1Dull) >> 32);
}

inline float uniform() { return (float)((int32_t)next()) / 2147483648.0f; }  // [-1, 1)

}  // namespace harness
