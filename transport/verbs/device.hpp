// RDMA verbs "device": the settings of a verbs job and the endpoints it opens (one UD queue
// pair per endpoint, on one port of one RDMA device). Set-up never blocks: Open finds the
// device and port at once; a port still coming up (INIT / ARMED, e.g. waiting for the subnet
// manager's LID) answers "not yet" (nullptr); no library, no device or a bad setting is a
// one-line Error that suggests --transport=udp or raw.
// Not for: discovering peers (the job layer exchanges each endpoint's Address() and calls
// AddPeer); talking to the subnet administrator (see endpoint.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "transport/frame.hpp"
#include "transport/transport.hpp"
#include "transport/verbs/api.hpp"

namespace hogstream {

class VerbsEndpoint;

using VerbsGid = std::array<uint8_t, 16>;

// Where a UD queue pair is: what a peer needs to send to it. The job layer carries it in its
// join messages (12 + 16 bytes, no pointers).
struct VerbsAddress {
  uint16_t lid = 0;  // the port's LID (InfiniBand); 0 on RoCE
  VerbsGid gid{};    // the port's GID at the job's gid index; all zero: send without a GRH
  uint32_t qpn = 0;  // the queue pair number
  bool operator==(const VerbsAddress&) const = default;
};

struct VerbsOptions {
  std::string device;            // RDMA device name (ibv_devices lists them); empty: the first
  uint8_t port = 1;              // port number on that device (1-based, as verbs counts)
  int gid_index = 0;             // GID table entry this endpoint sends from (RoCE v2: pick one)
  uint32_t qkey = 0x1ce5a17;     // UD queue key of the job (< 0x80000000: the high bit is reserved)
  uint32_t max_payload = 0;      // bytes; 0: the most the port's MTU carries (a multiple of 16)
  uint32_t send_slots = 64;      // frames a sender may have committed and not yet completed
  uint32_t recv_slots = 64;      // receive buffers: posted to the QP, or held by the caller
  uint32_t max_batch = 32;       // most messages one Poll returns
  uint64_t job = 0;              // frames of another job are counted and dropped
  std::optional<JobKey> key;     // --job-key: every frame carries a keyed MAC
  uint32_t heartbeat_ms = 50;    // a heartbeat to every peer at least this often; 0 = none and no peer timeout (the caller decides liveness)
  uint32_t peer_timeout_ms = 0;  // silence after which a heard peer is down; 0 = 10 heartbeats
  uint32_t signal_every = 16;    // one signalled send per this many (1..send_slots)
  const VerbsApi* api = nullptr;  // the verbs library; nullptr: VerbsApi::System() (tests: a fake)
};

class VerbsDevice final {
 public:
  explicit VerbsDevice(VerbsOptions opt);
  // Owner thread. The endpoint of peer `self`; nullptr while the port is not active yet.
  std::unique_ptr<Transport> Open(PeerId self);
  // The same, typed: the job layer needs Address(), AddPeer and AddGroup.
  std::unique_ptr<VerbsEndpoint> OpenEndpoint(PeerId self);
  const VerbsOptions& options() const { return opt_; }
  // Peers 0 and 1 on this device's port, each knowing the other: both ends of a link in one
  // process (tests; a bench). A port not active yet is an Error here.
  std::pair<std::unique_ptr<Transport>, std::unique_ptr<Transport>> LoopbackPair();

 private:
  VerbsOptions opt_;
};

}  // namespace hogstream
