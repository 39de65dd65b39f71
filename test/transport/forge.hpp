// A frame-crafting helper for tests that play an attacker (or a peer by hand) on UDP loopback:
// a plain socket on 127.0.0.1 that seals frames of our format holding any sync message (sync's
// header, sync/wire.hpp, and values),
// sends them, and reads and parses what a real endpoint sends to it. Registered as a peer of
// an endpoint (AddPeer with its port) its frames come from that peer's address; unregistered,
// it is a stranger. Every wait has a deadline.
#pragma once

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "sync/wire.hpp"
#include "transport/frame.hpp"
#include "transport/transport.hpp"

namespace hogstream::test {

class Forger {
 public:
  Forger() {
    fd_ = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in me{};
    me.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &me.sin_addr);
    ok_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&me), sizeof me) == 0;
    socklen_t len = sizeof me;
    ok_ = ok_ && getsockname(fd_, reinterpret_cast<sockaddr*>(&me), &len) == 0;
    port_ = ntohs(me.sin_port);
  }
  ~Forger() {
    if (fd_ >= 0) close(fd_);
  }
  Forger(const Forger&) = delete;
  Forger& operator=(const Forger&) = delete;

  bool ok() const { return ok_; }
  uint16_t port() const { return port_; }

  // Raw bytes to 127.0.0.1:port. False if the kernel did not take them whole.
  bool SendBytes(uint16_t port, const void* bytes, size_t n) const {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    return sendto(fd_, bytes, n, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) == static_cast<ssize_t>(n);
  }
  bool SendBytes(uint16_t port, const std::vector<std::byte>& bytes) const {
    return SendBytes(port, bytes.data(), bytes.size());
  }

  // A frame of `fmt` holding the sync message `h` (h.source is what the frame claims; h.length
  // bytes of values at `payload`).
  static std::vector<std::byte> Seal(const FrameFormat& fmt, const Header& h, const void* payload) {
    std::vector<std::byte> f(kWireHeaderBytes + h.length + fmt.overhead());
    PutHeader(f.data() + FrameFormat::kHeaderBytes, h);
    if (h.length) std::memcpy(f.data() + FrameFormat::kHeaderBytes + kWireHeaderBytes, payload, h.length);
    fmt.Seal(f.data(), FrameHeader{FrameType::kData, h.source, kWireHeaderBytes + h.length});
    return f;
  }
  bool Send(uint16_t port, const FrameFormat& fmt, const Header& h, const void* payload) const {
    return SendBytes(port, Seal(fmt, h, payload));
  }

  // Datagrams of any kind that arrived within `limit` (a transport's heartbeats too).
  size_t Count(std::chrono::milliseconds limit) const {
    size_t n = 0;
    std::vector<std::byte> buf(1 << 16);
    const auto end = std::chrono::steady_clock::now() + limit;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return n;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return n;
      n += recv(fd_, buf.data(), buf.size(), 0) >= 0;
    }
  }

  // The sync messages that arrived within `limit` (at most `max` datagrams), parsed with `fmt`;
  // datagrams that are not good frames of it holding a sync message are skipped.
  struct Got {
    Header h;
    std::vector<std::byte> payload;
  };
  std::vector<Got> Receive(const FrameFormat& fmt, std::chrono::milliseconds limit, size_t max = 256) const {
    std::vector<Got> got;
    std::vector<std::byte> buf(1 << 16);
    const auto end = std::chrono::steady_clock::now() + limit;
    while (got.size() < max) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      const ssize_t n = recv(fd_, buf.data(), buf.size(), 0);
      if (n <= 0) continue;
      const size_t bytes = fmt.Unpadded(buf.data(), static_cast<size_t>(n));  // senders pad after the trailer
      FrameHeader f;
      const std::byte* payload = nullptr;
      if (fmt.Parse(buf.data(), bytes, 1 << 16, &f, &payload)) continue;
      Header h;
      if (!GetHeader(payload, f.length, f.source, &h)) continue;
      const std::byte* values = payload + kWireHeaderBytes;
      got.push_back({h, std::vector<std::byte>(values, values + h.length)});
    }
    return got;
  }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  bool ok_ = false;
};

}  // namespace hogstream::test
