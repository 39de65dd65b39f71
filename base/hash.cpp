// XXH3-64 through xxHash's header (inlined: one call, no library symbol to resolve).
#include "base/hash.hpp"

// (GCC 12 warns falsely about its own AVX-512 intrinsics inside xxhash.h.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define XXH_INLINE_ALL
#include <xxhash.h>
#pragma GCC diagnostic pop

namespace hogstream {

uint64_t Digest64(const void* data, size_t n) { return XXH3_64bits(data, n); }

}  // namespace hogstream
