// Helpers the transport tests (and tests of what opens transports) share. A transport carries opaque bytes; these tests
// send sync's messages over it (sync's header, then values: sync/wire.hpp), as a job does, so
// a message's identity (kind, chunk, seq) travels in its payload and is read back on receipt:
// Post / Commit write one into a slot, MessageOf reads one from a Packet. Also a sealed frame
// built by hand (for injecting through a raw socket or a fake QP), a bounded poll, and a
// delivery check between two endpoints. Every wait has a deadline.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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

// Sends 16 floats tagged `seq` (a sync position) from `a` to `to` until `b` has them, resent
// every 100 ms, for at most `wait`; the source b is told must be a, the values unchanged. (An
// echo of b's own group sends is skipped.)
inline ::testing::AssertionResult Delivers(Transport* a, Dest to, Transport* b, uint64_t seq,
                                           std::chrono::milliseconds wait = std::chrono::seconds(5)) {
  float out[16];
  for (int i = 0; i < 16; ++i) out[i] = static_cast<float>(seq * 100 + i);
  Header h;
  h.kind = MsgKind::kPosition;
  h.seq = seq;
  h.length = sizeof out;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  auto resend = std::chrono::steady_clock::now();
  Packet m[8];
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::chrono::steady_clock::now() >= resend) {
      Post(*a, to, h, out);
      resend = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    }
    a->Flush();
    const size_t n = b->Poll(m, 8);
    for (size_t i = 0; i < n; ++i) {
      const Message got = MessageOf(m[i]);
      if (got.h.seq != seq || m[i].source == b->self()) continue;
      const bool same = got.h.length == sizeof out && std::memcmp(got.payload, out, sizeof out) == 0;
      const PeerId source = m[i].source;
      b->Release(n);
      if (source != a->self()) return ::testing::AssertionFailure() << "source " << source << ", sent by " << a->self();
      if (!same) return ::testing::AssertionFailure() << "payload changed on the way";
      return ::testing::AssertionSuccess();
    }
    b->Release(n);
    if (!n) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return ::testing::AssertionFailure() << "message " << seq << " from peer " << a->self() << " not received in "
                                       << wait.count() << " ms";
}

// `n` distinct UDP ports free on 127.0.0.1: each bound at once (so they differ), then let go.
inline std::vector<uint16_t> FreeUdpPorts(int n) {
  std::vector<int> fds;
  std::vector<uint16_t> ports;
  for (int i = 0; i < n; ++i) {
    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      ADD_FAILURE() << "no free UDP port on 127.0.0.1";
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds) close(fd);
  return ports;
}

}  // namespace hogstream::test
