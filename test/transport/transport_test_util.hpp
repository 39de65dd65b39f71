// Helpers the transport backends' tests share. A transport carries opaque bytes; these tests
// send sync's messages over it (sync's header, then values: sync/wire.hpp), as a job does, so
// a message's identity (kind, chunk, seq) travels in its payload and is read back on receipt:
// Post / Commit write one into a slot, MessageOf reads one from a Packet. Also a sealed frame
// built by hand (for injecting through a raw socket or a fake QP) and a bounded poll. Every
// wait has a deadline.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "sync/wire.hpp"
#include "transport/frame.hpp"
#include "transport/transport.hpp"

namespace hogstream::test {

// A transport payload of the sync message h with h.length bytes of values.
inline uint32_t Bytes(const Header& h) { return kWireHeaderBytes + h.length; }

// AcquireSend + sync's header + the values + CommitSend; false: no free slot, nothing sent.
inline bool Post(Transport& t, Dest to, const Header& h, const void* values) {
  HS_CHECK_LE(Bytes(h), t.caps().max_payload) << "test::Post: a message longer than a slot";
  std::byte* slot = t.AcquireSend();
  if (!slot) return false;
  PutHeader(slot, h);
  if (h.length) std::memcpy(slot + kWireHeaderBytes, values, h.length);
  t.CommitSend(to, Bytes(h));
  return true;
}
// Writes sync's header into the slot AcquireSend gave (the values already at slot +
// kWireHeaderBytes) and commits it.
inline void Commit(Transport& t, std::byte* slot, Dest to, const Header& h) {
  PutHeader(slot, h);
  t.CommitSend(to, Bytes(h));
}

// A good frame of `fmt` holding a sync delta of seq 1 with `value_bytes` bytes of 1s, claiming to
// come from `claimed` (receivers must not believe it).
inline std::vector<std::byte> SealedFrame(const FrameFormat& fmt, uint32_t value_bytes, PeerId claimed = 0) {
  std::vector<std::byte> f(kWireHeaderBytes + value_bytes + fmt.overhead(), std::byte{1});
  Header h;
  h.kind = MsgKind::kDelta;
  h.seq = 1;
  h.length = value_bytes;
  PutHeader(f.data() + FrameFormat::kHeaderBytes, h);
  fmt.Seal(f.data(), FrameHeader{FrameType::kData, claimed, Bytes(h)});
  return f;
}

// Polls until `want` messages arrived or `limit` passed (releasing each, their sync headers into
// `got`); returns how many did.
inline size_t PollFor(Transport* t, size_t want, std::vector<Header>* got = nullptr,
                      std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  size_t n = 0;
  Packet m[8];
  while (n < want && std::chrono::steady_clock::now() < deadline) {
    const size_t k = t->Poll(m, 8);
    for (size_t i = 0; i < k; ++i)
      if (got) got->push_back(MessageOf(m[i]).h);
    t->Release(k);
    n += k;
    if (!k) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return n;
}

}  // namespace hogstream::test
