// The compiled layout of the step's structs (step_args.h), for the ctypes mirror to be checked against:
// tinyllm/model/native/library.py compares it at load, and a test field by field.
#include <cstddef>
#include <cstdint>

#include "step_args.h"

extern "C" {

// out: sizeof of each struct in table order, then (offsetof, sizeof) of each field in table order; writes at
// most `capacity` values and returns how many there are.
int64_t tl_decode_layout(int64_t* out, int64_t capacity) {
#define TL_SIZE(S) (int64_t)sizeof(tl::S),
#define TL_FIELD(S, F) (int64_t)offsetof(tl::S, F), (int64_t)sizeof(tl::S::F),
    const int64_t values[] = {TL_STEP_STRUCTS(TL_SIZE) TL_STEP_FIELDS(TL_FIELD)};
#undef TL_SIZE
#undef TL_FIELD
    const int64_t count = (int64_t)(sizeof(values) / sizeof(values[0]));
    for (int64_t i = 0; i < count && i < capacity; ++i) out[i] = values[i];
    return count;
}
}
