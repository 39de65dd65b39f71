// Fixed-width values at any byte address, in the host's order: what the wire formats (frames,
// sync's header) are packed with. memcpy, so an unaligned address is fine. Little-endian hosts
// only: the formats say so, and their files assert it. Pure functions: any thread.
#pragma once

#include <cstddef>
#include <cstring>

namespace hogstream {

template <class T>
void PutBytes(std::byte* at, T v) {
  std::memcpy(at, &v, sizeof v);
}

template <class T>
T GetBytes(const std::byte* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

}  // namespace hogstream
