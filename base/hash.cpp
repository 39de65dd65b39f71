// XXH3-64 through xxHash's header, compiled here for this build's target (-march: AVX2/AVX-512
// where the build machine has them) rather than called in Debian's libxxhash.so, which is built
// for baseline x86-64 (SSE2): perf showed the shared library at 21% of all CPU of a raw-Ethernet
// bench at MTU 9000, against ~3% compiled in. Frames checksum with it (transport/frame.cpp).
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
