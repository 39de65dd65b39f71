// The simulated network (transport/sim/endpoint.hpp): frames arrive when the links' bandwidth
// and latency say, a group send reaches every other peer, loss follows the seed, and nothing
// is handed out before its time.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "test/test_seed.hpp"
#include "transport/sim/endpoint.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

std::vector<std::byte> Bytes(uint32_t n, std::mt19937& gen) {
  std::vector<std::byte> b(n);
  for (auto& x : b) x = static_cast<std::byte>(gen() & 0xff);
  return b;
}

TEST(SimNetwork, AFrameArrivesAfterItsWireTimeAndLatencyWithItsBytes) {
  std::mt19937 gen(TestSeed());
  SimLinkOptions link;
  link.latency_us = 30 + gen() % 100;
  link.gbit_per_s = 1;
  SimNetwork net(3, link, 7);
  const uint32_t n = 1000 + gen() % 8000;
  const auto payload = Bytes(n, gen);
  ASSERT_TRUE(net.endpoint(0)->PostSend(Dest::Peer(2), payload.data(), n));
  net.endpoint(0)->Flush();
  PeerId to = kNoPeer;
  const double at = net.NextDelivery(&to);
  const double wire_us = n * 8.0 / 1000.0;  // 1 Gbit/s: 1000 bits per microsecond
  EXPECT_EQ(to, 2);
  EXPECT_NEAR(at, wire_us + link.latency_us, 1e-9);
  Packet p[4];
  net.AdvanceTo(at - 0.5);
  EXPECT_EQ(net.endpoint(2)->Poll(p, 4), 0u) << "handed out before it arrived";
  net.AdvanceTo(at);
  ASSERT_EQ(net.endpoint(2)->Poll(p, 4), 1u);
  EXPECT_EQ(p[0].source, 0);
  ASSERT_EQ(p[0].length, n);
  EXPECT_EQ(0, std::memcmp(p[0].payload, payload.data(), n));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p[0].payload) % 16, 0u);
  EXPECT_EQ(net.endpoint(2)->Poll(p, 4), 0u) << "a message handed out twice";
  net.endpoint(2)->Release(1);
  EXPECT_EQ(net.endpoint(1)->Poll(p, 4), 0u) << "a peer send reached another peer";
  EXPECT_TRUE(std::isinf(net.NextDelivery(nullptr)));
}

TEST(SimNetwork, ALinkSerialisesItsSendsAndAReceiverItsArrivals) {
  SimLinkOptions link;
  link.latency_us = 10;
  link.gbit_per_s = 8;  // 1 byte per ns: 1000 bytes take 1 us
  SimNetwork net(3, link, 1);
  std::vector<std::byte> b(4000);
  // Two sends of 4 us each from peer 0 to 1: the second leaves when the first has.
  net.endpoint(0)->PostSend(Dest::Peer(1), b.data(), 4000);
  net.endpoint(0)->PostSend(Dest::Peer(1), b.data(), 4000);
  Packet p[4];
  net.AdvanceTo(14);
  EXPECT_EQ(net.endpoint(1)->Poll(p, 4), 1u);
  net.AdvanceTo(18);
  EXPECT_EQ(net.endpoint(1)->Poll(p, 4), 1u);
  net.endpoint(1)->Release(2);
  // Peers 0 and 2 send to 1 at once: their links are free, but 1's link takes one at a time.
  net.endpoint(0)->PostSend(Dest::Peer(1), b.data(), 4000);
  net.endpoint(2)->PostSend(Dest::Peer(1), b.data(), 4000);
  PeerId to;
  EXPECT_NEAR(net.NextDelivery(&to), 18 + 4 + 10, 1e-9);
  net.AdvanceTo(32);
  EXPECT_EQ(net.endpoint(1)->Poll(p, 4), 1u);
  net.AdvanceTo(35.9);
  EXPECT_EQ(net.endpoint(1)->Poll(p, 4), 0u);
  net.AdvanceTo(36);
  EXPECT_EQ(net.endpoint(1)->Poll(p, 4), 1u);
}

TEST(SimNetwork, AGroupSendReachesEveryOtherPeerOnce) {
  std::mt19937 gen(TestSeed());
  const int peers = 3 + static_cast<int>(gen() % 6);
  SimNetwork net(peers, {}, 3);
  const auto payload = Bytes(64, gen);
  const PeerId from = static_cast<PeerId>(gen() % peers);
  ASSERT_TRUE(net.endpoint(from)->PostSend(Dest::Group(0), payload.data(), 64));
  net.AdvanceTo(1e6);
  Packet p[4];
  for (int r = 0; r < peers; ++r) {
    const size_t got = net.endpoint(static_cast<PeerId>(r))->Poll(p, 4);
    EXPECT_EQ(got, r == from ? 0u : 1u) << "peer " << r;
    if (got) {
      EXPECT_EQ(p[0].source, from);
    }
  }
  EXPECT_EQ(net.bytes_sent(), 64u) << "a group send crosses the sender's link once";
}

TEST(SimNetwork, LossFollowsItsProbabilityAndItsSeed) {
  auto lost = [](uint64_t seed) {
    SimLinkOptions link;
    link.loss = 0.2;
    SimNetwork net(2, link, seed);
    std::byte b[32] = {};
    for (int i = 0; i < 2000; ++i) {
      b[0] = static_cast<std::byte>(i & 0xff);
      net.endpoint(0)->PostSend(Dest::Peer(1), b, sizeof b);
    }
    return net.messages_lost();
  };
  const uint64_t seed = TestSeed();
  const uint64_t a = lost(seed);
  EXPECT_EQ(a, lost(seed)) << "one seed, two outcomes";
  EXPECT_NEAR(static_cast<double>(a) / 2000, 0.2, 0.05);
}

TEST(SimNetwork, BadSettingsAreOneLine) {
  SimLinkOptions link;
  link.gbit_per_s = 0;
  EXPECT_THROW(SimNetwork(2, link, 1), Error);
  link = {};
  link.loss = 1;
  EXPECT_THROW(SimNetwork(2, link, 1), Error);
  EXPECT_THROW(SimNetwork(0, {}, 1), Error);
}

}  // namespace
}  // namespace hogstream
