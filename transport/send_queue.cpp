// The shared send machinery's out-of-line parts: slot memory and the pacer's refill (see
// send_queue.hpp).
#include "transport/send_queue.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace hogstream {

SlotMemory AllocSlots(size_t bytes, size_t align, bool zero) {
  const size_t n = (bytes + align - 1) / align * align;
  SlotMemory p{static_cast<std::byte*>(std::aligned_alloc(align, n)), std::free};
  if (!p) throw std::bad_alloc();
  if (zero) std::memset(p.get(), 0, n);
  return p;
}

void Pacer::Refill(SteadyTime now) {
  if (!rate_) return;
  tokens_ = std::min(burst_, tokens_ + std::chrono::duration<double>(now - last_).count() * static_cast<double>(rate_));
  last_ = now;
}

}  // namespace hogstream
