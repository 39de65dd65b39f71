// The simulated network (endpoint.hpp): a send is copied at once into each receiver's queue,
// stamped with the virtual time it arrives; Poll hands out what has arrived by now.
// Timing model, per message of B bytes sent at time t by peer s to peer r:
//   leaves s's link at   out = max(t, s free) + B / rate      (s's link serialises its sends)
//   arrives at r at      at  = max(out + latency, r free + B / rate)  (r's link, too)
// so many senders to one receiver queue behind each other, as on a switch port.
#include "transport/sim/endpoint.hpp"

#include <algorithm>
#include <cstring>

namespace hogstream {

namespace {
constexpr uint32_t kSendSlots = 256;
constexpr uint32_t kMaxBatch = 64;
constexpr size_t kHeldMax = 4096;  // messages a receiver may hold unreleased
}  // namespace

class SimNetwork::End : public Transport {
 public:
  End(SimNetwork* net, PeerId self) : net_(net), self_(self), slot_(net->link_.max_payload + 64) {}

  PeerId self() const override { return self_; }
  Caps caps() const override {
    Caps c;
    c.max_payload = net_->link_.max_payload;
    c.alignment = 16;
    c.send_slots = kSendSlots;
    c.max_batch = kMaxBatch;
    c.multicast = true;
    return c;
  }

  std::byte* AcquireSend() override {
    acquired_ = true;
    return Aligned();
  }
  void CommitSend(Dest to, uint32_t length) override {
    HS_CHECK(acquired_) << "CommitSend without AcquireSend";
    HS_CHECK_LE(length, net_->link_.max_payload);
    acquired_ = false;
    CountSent(to, length);
    net_->Send(self_, to, Aligned(), length);
  }
  void Flush() override { acquired_ = false; }

  size_t Poll(Packet* out, size_t max) override {
    auto& q = net_->queues_[self_];
    size_t n = 0;
    while (n < max && held_.size() < kHeldMax && !q.empty() && q.front().at <= net_->now_us_) {
      held_.push_back(std::move(q.front()));
      q.pop_front();
      const InFlight& m = held_.back();
      out[n++] = Packet{m.from, static_cast<uint32_t>(m.bytes.size()), m.bytes.data()};
    }
    CountReceived(out, n);
    return n;
  }
  void Release(size_t n) override {
    HS_CHECK_LE(n, held_.size()) << "Release of more messages than Poll handed out";
    held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(n));
  }

 private:
  std::byte* Aligned() {
    auto p = reinterpret_cast<uintptr_t>(slot_.data());
    return slot_.data() + ((64 - p % 64) % 64);
  }

  SimNetwork* net_;
  PeerId self_;
  std::vector<std::byte> slot_;  // the one send slot: a commit copies it out at once
  bool acquired_ = false;
  std::deque<InFlight> held_;    // handed out by Poll, not yet released (oldest first)
};

SimNetwork::SimNetwork(int peers, SimLinkOptions link, uint64_t seed)
    : link_(link), rng_(seed), link_free_(peers, 0.0), rx_free_(peers, 0.0), queues_(peers) {
  HS_REQUIRE(peers > 0 && peers < kNoPeer) << "simulated network: 1 to 65534 peers, not " << peers;
  HS_REQUIRE(link.gbit_per_s > 0 && link.latency_us >= 0 && link.loss >= 0 && link.loss < 1)
      << "simulated network: bandwidth > 0, latency >= 0, loss in [0, 1)";
  for (int p = 0; p < peers; ++p) ends_.push_back(std::make_unique<End>(this, static_cast<PeerId>(p)));
}

SimNetwork::~SimNetwork() = default;

Transport* SimNetwork::endpoint(PeerId p) {
  HS_CHECK_LT(p, ends_.size());
  return ends_[p].get();
}

void SimNetwork::AdvanceTo(double us) { now_us_ = std::max(now_us_, us); }

double SimNetwork::NextDelivery(PeerId* to) const {
  double best = std::numeric_limits<double>::infinity();
  for (size_t r = 0; r < queues_.size(); ++r)
    if (!queues_[r].empty() && queues_[r].front().at < best) {
      best = queues_[r].front().at;
      if (to) *to = static_cast<PeerId>(r);
    }
  return best;
}

void SimNetwork::Send(PeerId from, Dest to, const std::byte* payload, uint32_t length) {
  // 1 Gbit/s = 1000 bits per microsecond; a frame's overhead (headers, gaps) is not modelled.
  const double wire_us = static_cast<double>(length) * 8.0 / (link_.gbit_per_s * 1000.0);
  const double out = std::max(now_us_, link_free_[from]) + wire_us;
  link_free_[from] = out;
  bytes_ += length;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto deliver = [&](PeerId r) {
    if (link_.loss > 0 && unit(rng_) < link_.loss) {
      ++lost_;
      return;
    }
    const double at = std::max(out + link_.latency_us, rx_free_[r] + wire_us);
    rx_free_[r] = at;
    InFlight m{at, order_++, from, std::vector<std::byte>(payload, payload + length)};
    auto& q = queues_[r];
    // Arrivals at r are in time order (rx_free_ only grows), so this is nearly always the back.
    auto pos = std::upper_bound(q.begin(), q.end(), m, [](const InFlight& a, const InFlight& b) {
      return a.at < b.at || (a.at == b.at && a.order < b.order);
    });
    q.insert(pos, std::move(m));
  };
  if (!to.group) {
    HS_CHECK_LT(to.id, queues_.size()) << "simulated network: no peer " << to.id;
    deliver(to.id);
    return;
  }
  for (size_t r = 0; r < queues_.size(); ++r)
    if (r != from) deliver(static_cast<PeerId>(r));
}

}  // namespace hogstream
