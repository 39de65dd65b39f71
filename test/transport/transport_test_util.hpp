// Helpers the transport backends' tests share: a sealed frame built by hand (for injecting
// through a raw socket or a fake QP) and a bounded poll. Every wait has a deadline.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "transport/frame.hpp"
#include "transport/transport.hpp"

namespace hogstream::test {

// A good frame of `fmt` with `payload_bytes` bytes of 1s, a delta of seq 1 claiming to come
// from `claimed` (receivers must not believe it).
inline std::vector<std::byte> SealedFrame(const FrameFormat& fmt, uint32_t payload_bytes, PeerId claimed = 0) {
  std::vector<std::byte> f(payload_bytes + fmt.overhead(), std::byte{1});
  Header h;
  h.kind = MsgKind::kDelta;
  h.seq = 1;
  h.source = claimed;
  h.length = payload_bytes;
  fmt.Seal(f.data(), h);
  return f;
}

// Polls until `want` messages arrived or `limit` passed (releasing each, their headers into
// `got`); returns how many did.
inline size_t PollFor(Transport* t, size_t want, std::vector<Header>* got = nullptr,
                      std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  size_t n = 0;
  Message m[8];
  while (n < want && std::chrono::steady_clock::now() < deadline) {
    const size_t k = t->Poll(m, 8);
    for (size_t i = 0; i < k; ++i)
      if (got) got->push_back(m[i].h);
    t->Release(k);
    n += k;
    if (!k) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return n;
}

}  // namespace hogstream::test
