// A simulated network in virtual time: N peers in one process, each message delivered at a
// time computed from its sender's and receiver's links (a bandwidth that serialises their
// messages, and a latency)
// and lost with a probability, from a seed. Nothing runs by itself: the caller (the job
// simulator, sync/simulate.hpp) owns the clock, moves it to NextDelivery() or to its own
// events, and polls. Same seed, same calls: the same deliveries, bit for bit.
// Not for: real time or threads (every call from one thread); framing (no bytes leave).
//
// Contract: as in transport.hpp, with "now" the network's virtual clock. A group send reaches
// every other peer (one serialisation on the sender's link, each copy lost on its own).
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "transport/transport.hpp"

namespace hogstream {

struct SimLinkOptions {
  double latency_us = 50;     // one way, per message
  double gbit_per_s = 10;     // each sender's link
  double loss = 0;            // probability that one copy of a message is lost
  uint32_t max_payload = 16384;
};

class SimNetwork {
 public:
  SimNetwork(int peers, SimLinkOptions link, uint64_t seed);
  ~SimNetwork();
  SimNetwork(const SimNetwork&) = delete;
  SimNetwork& operator=(const SimNetwork&) = delete;

  // Peer p's endpoint (made once; the network outlives it).
  Transport* endpoint(PeerId p);
  int peers() const { return static_cast<int>(ends_.size()); }

  double now_us() const { return now_us_; }
  // Moves the clock (never back).
  void AdvanceTo(double us);
  // The earliest pending delivery to any peer, and to whom (infinity: none).
  double NextDelivery(PeerId* to) const;

  uint64_t bytes_sent() const { return bytes_; }
  uint64_t messages_lost() const { return lost_; }

 private:
  class End;
  friend class End;
  struct InFlight {
    double at;
    uint64_t order;
    PeerId from;
    std::vector<std::byte> bytes;
  };
  void Send(PeerId from, Dest to, const std::byte* payload, uint32_t length);

  SimLinkOptions link_;
  std::mt19937_64 rng_;
  double now_us_ = 0;
  uint64_t order_ = 0, bytes_ = 0, lost_ = 0;
  std::vector<double> link_free_;                 // per sender: when its link is free again
  std::vector<double> rx_free_;                   // per receiver: when its last arrival ends
  std::vector<std::deque<InFlight>> queues_;      // per receiver, by (at, order)
  std::vector<std::unique_ptr<End>> ends_;
};

}  // namespace hogstream
