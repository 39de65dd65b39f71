// In-process endpoint: two peers (0 and 1) of one process, each direction a ring of
// preallocated slots moved between threads by two lock-free single-producer/single-consumer
// queues (ready: sender -> receiver; free: receiver -> sender). Used by the cpu segment and by
// tests. Not for: crossing processes (shm) or hosts (udp/, raw/, verbs/); more than two peers.
// A group send reaches the other peer (the only other member of any group).
//
// Contract: as in transport.hpp. Nothing here frames or checksums: no bytes leave the process.
// Peer down: an endpoint destroyed while its peer lives latches kPeerDown in the peer's status.
#pragma once

#include <memory>

#include "transport/transport.hpp"

namespace hogstream {

class InprocChannel;  // one direction of a pair; defined in the .cpp (keeps Boost out of here)

class InprocEndpoint final : public Transport {
 public:
  InprocEndpoint(PeerId self, std::shared_ptr<InprocChannel> out, std::shared_ptr<InprocChannel> in);
  ~InprocEndpoint() override;

  PeerId self() const override { return self_; }
  Caps caps() const override;
  std::byte* AcquireSend() override;
  void CommitSend(Dest to, uint32_t length) override;
  void Flush() override {}  // a commit is delivered at once
  size_t Poll(Packet* out, size_t max) override;
  void Release(size_t n) override;
  Status status() const override;

 private:
  const PeerId self_;
  std::shared_ptr<InprocChannel> out_, in_;
};

}  // namespace hogstream
