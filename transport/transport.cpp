// Names for logs and counters, and the counters' snapshot (see transport.hpp).
#include "transport/transport.hpp"

#include <poll.h>

#include <thread>

namespace hogstream {

const char* RejectName(Reject r) {
  switch (r) {
    case Reject::kShort: return "short";
    case Reject::kMagic: return "magic";
    case Reject::kVersion: return "version";
    case Reject::kJob: return "job";
    case Reject::kChecksum: return "checksum";
    case Reject::kMac: return "mac";
    case Reject::kLength: return "length";
    case Reject::kHeader: return "header";
    case Reject::kSender: return "sender";
    case Reject::kCount: break;
  }
  return "unknown";
}

TransportCounters Transport::Counters::Snapshot() const {
  constexpr auto r = std::memory_order_relaxed;
  TransportCounters c;
  c.sent = sent.load(r);
  c.bytes_sent = bytes_sent.load(r);
  c.send_full = send_full.load(r);
  c.received = received.load(r);
  c.bytes_received = bytes_received.load(r);
  c.dropped = dropped.load(r);
  c.duplicated = duplicated.load(r);
  c.reordered = reordered.load(r);
  c.delayed = delayed.load(r);
  for (size_t i = 0; i < rejected.size(); ++i) c.rejected[i] = rejected[i].load(r);
  c.kernel_dropped = kernel_dropped.load(r);
  return c;
}

std::vector<PeerCounters> Transport::Counters::PeerSnapshot() const {
  constexpr auto r = std::memory_order_relaxed;
  std::vector<PeerCounters> out;
  for (size_t i = 0; i < kTalliedPeers; ++i) {
    const Peer& p = peers[i];
    PeerCounters c;
    c.peer = static_cast<PeerId>(i);
    c.sent = p.sent.load(r);
    c.bytes_sent = p.bytes_sent.load(r);
    c.dropped = p.dropped.load(r);
    c.received = p.received.load(r);
    c.bytes_received = p.bytes_received.load(r);
    for (size_t k = 0; k < c.rejected.size(); ++k) c.rejected[k] = p.rejected[k].load(r);
    if (c.sent || c.received || c.dropped || c.rejected_total()) out.push_back(c);
  }
  return out;
}

void Transport::Latch(Status::Code code, PeerId peer, const std::string& what) {
  std::lock_guard<std::mutex> lock(status_mu_);
  if (status_.code != Status::kOk) return;
  status_.code = code;
  status_.peer = peer;
  status_.what = what;
  failed_.store(true, std::memory_order_release);
}

Status Transport::status() const {
  std::lock_guard<std::mutex> lock(status_mu_);
  return status_;
}

void Transport::CountReceived(const Packet* out, size_t n) {
  if (n == 0) return;
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; ++i) bytes += out[i].length;
  Bump(counters_.received, n);
  Bump(counters_.bytes_received, bytes);
  for (size_t i = 0; i < n; ++i) {
    if (Counters::Peer* p = counters_.peer(out[i].source)) {
      Bump(p->received);
      Bump(p->bytes_received, out[i].length);
    }
  }
}

void Transport::LatchSilentPeer(const std::map<PeerId, std::chrono::steady_clock::time_point>& heard,
                                std::chrono::milliseconds timeout, const char* backend) {
  if (failed() || timeout.count() == 0) return;  // 0: no timeout (no heartbeats: the caller decides)
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [peer, when] : heard) {
    if (now - when > timeout) {
      Latch(Status::kPeerDown, peer,
            std::string(backend) + ": peer " + std::to_string(peer) + " silent for " +
                std::to_string(timeout.count()) + " ms");
      return;
    }
  }
}

void Transport::Idle(std::chrono::milliseconds most, std::chrono::microseconds no_fd) const {
  const int fd = wait_fd();
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(most.count()));
  } else if (no_fd.count() > 0) {
    std::this_thread::sleep_for(no_fd);
  } else {
    std::this_thread::yield();
  }
}

}  // namespace hogstream
