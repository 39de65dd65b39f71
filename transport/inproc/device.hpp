// The in-process "device": the two channels of a pair of peers in one process, and the
// endpoints over them. Open(0) and Open(1) each succeed once (set-up is immediate).
// Owner: whoever made it; endpoints keep the channels alive, so the device may go first.
#pragma once

#include <memory>
#include <utility>

#include "transport/inproc/endpoint.hpp"
#include "transport/transport.hpp"

namespace hogstream {

struct InprocOptions {
  uint32_t max_payload = 4096;  // bytes per slot (rounded up to a cache line in storage)
  uint32_t slots = 4;           // send slots per direction
};

class InprocDevice final {
 public:
  explicit InprocDevice(const InprocOptions& opt);
  // Peer 0 or 1; each once. Never "not yet".
  std::unique_ptr<Transport> Open(PeerId self);

  using Pair = std::pair<std::unique_ptr<Transport>, std::unique_ptr<Transport>>;
  // Both ends at once: (peer 0, peer 1).
  static Pair MakePair(const InprocOptions& opt);

 private:
  std::shared_ptr<InprocChannel> to1_, to0_;  // 0 -> 1, 1 -> 0
  bool opened_[2] = {false, false};
};

}  // namespace hogstream
