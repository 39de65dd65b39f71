// Tests of transport/udp beyond the typed ones (test/transport/transport_test.cc): foreign,
// corrupt, short, oversized and unknown-version datagrams are counted per reason and dropped;
// multicast on loopback reaches every member (skipped where the kernel refuses the group);
// pacing bounds the send rate; wait_fd wakes a poll(); a SIGKILLed peer process becomes "peer
// down" within a deadline; bad settings are one-line Errors. Traffic: 127.0.0.1 and
// 239.255.0.0/16 on lo only, bounded in count and time.
#include "transport/udp/endpoint.hpp"

#include "base/common.hpp"
#include "transport/frame.hpp"

#include "test/test_seed.hpp"
#include "test/transport/forge.hpp"
#include "test/transport/transport_test_util.hpp"
#include "test/transport/veth.hpp"
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <thread>
#include <vector>

namespace hogstream {
namespace HS_UNITY_ID {

using test::PollFor;
using test::SealedFrame;

using Clock = std::chrono::steady_clock;

UdpOptions Opts() {
  UdpOptions o;
  o.max_payload = 1024;
  o.send_slots = o.recv_slots = 32;
  o.job = 77;
  o.heartbeat_ms = 10;
  o.peer_timeout_ms = 200;
  return o;
}

std::unique_ptr<UdpEndpoint> Open(PeerId self, const UdpOptions& o = Opts()) {
  return std::make_unique<UdpEndpoint>(self, o);
}

// A plain socket on 127.0.0.1 that sends hand-made datagrams (test/transport/forge.hpp).
struct RawSocket : test::Forger {
  void Send(uint16_t port, const std::vector<std::byte>& bytes) const { EXPECT_TRUE(SendBytes(port, bytes)); }
};

TEST(UdpTransportTest, BadFramesAreCountedPerReasonAndDropped) {
  auto a = Open(0);
  RawSocket peer, stranger;
  ASSERT_TRUE(peer.ok() && stranger.ok());
  a->AddPeer(1, "127.0.0.1", peer.port());
  const FrameFormat ours(77), theirs(78);
  peer.Send(a->port(), SealedFrame(theirs, 64, 1));  // another job
  auto corrupt = SealedFrame(ours, 64, 1);
  corrupt[60] ^= std::byte{4};
  peer.Send(a->port(), corrupt);
  peer.Send(a->port(), std::vector<std::byte>(10, std::byte{0}));  // short
  peer.Send(a->port(), {});                                         // empty
  peer.Send(a->port(), SealedFrame(ours, 2048, 1));  // over max_payload (1024)
  peer.Send(a->port(), SealedFrame(ours, 8000, 1));  // larger than a frame slot (truncated), or than max_payload
  auto version = SealedFrame(ours, 64, 1);
  version[4] = std::byte{9};
  peer.Send(a->port(), version);
  peer.Send(a->port(), SealedFrame(ours, 64, 2));      // a good frame claiming another peer
  stranger.Send(a->port(), SealedFrame(ours, 64, 1));  // a good frame from an address not in the job
  peer.Send(a->port(), SealedFrame(ours, 64, 1));      // the one good frame
  std::vector<Header> got;
  EXPECT_EQ(PollFor(a.get(), 1, &got), 1u);
  EXPECT_EQ(PollFor(a.get(), 1, nullptr, std::chrono::milliseconds(50)), 0u) << "a bad frame was delivered";
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].source, 1);
  const TransportCounters c = a->counters();
  auto rejected = [&](Reject r) { return c.rejected[static_cast<size_t>(r)]; };
  EXPECT_EQ(rejected(Reject::kJob), 1u);
  EXPECT_EQ(rejected(Reject::kChecksum), 1u);
  EXPECT_EQ(rejected(Reject::kShort), 2u);
  EXPECT_EQ(rejected(Reject::kLength), 2u);
  EXPECT_EQ(rejected(Reject::kVersion), 1u);
  EXPECT_EQ(rejected(Reject::kSender), 2u);
  EXPECT_EQ(c.rejected_total(), 9u);
  EXPECT_EQ(c.received, 1u);
  EXPECT_TRUE(a->status().ok());
  // Per peer, by the datagram's source address: all but the stranger's are peer 1's.
  const std::vector<PeerCounters> peers = a->peer_counters();
  ASSERT_EQ(peers.size(), 1u) << "the stranger is no peer";
  const PeerCounters& p = peers[0];
  EXPECT_EQ(p.peer, 1);
  EXPECT_EQ(p.received, 1u);
  EXPECT_EQ(p.bytes_received, c.bytes_received);
  for (Reject r : {Reject::kJob, Reject::kChecksum, Reject::kShort, Reject::kLength, Reject::kVersion})
    EXPECT_EQ(p.rejected[static_cast<size_t>(r)], rejected(r)) << RejectName(r);
  EXPECT_EQ(p.rejected[static_cast<size_t>(Reject::kSender)], 1u) << "the frame claiming peer 2";
  EXPECT_EQ(p.rejected_total(), 8u);
  EXPECT_EQ(p.sent, 0u);
}

TEST(UdpTransportTest, KeyedEndpointsRefuseUnkeyedAndOtherKeys) {
  UdpOptions o = Opts();
  JobKey k{};
  k[3] = 1;
  o.key = k;
  auto a = Open(0, o), b = Open(1, o);
  UdpOptions other = o;
  other.key->at(3) = 2;
  auto c = Open(2, other);
  for (auto* from : {b.get(), c.get()}) {
    from->AddPeer(0, "127.0.0.1", a->port());
    a->AddPeer(from->self(), "127.0.0.1", from->port());
    const float p = 1;
    Header h;
    h.kind = MsgKind::kDelta;
    h.length = 4;
    ASSERT_TRUE(test::Post(*from, Dest::Peer(0), h, &p));
    from->Flush();
  }
  RawSocket unkeyed;
  ASSERT_TRUE(unkeyed.ok());
  a->AddPeer(3, "127.0.0.1", unkeyed.port());
  unkeyed.Send(a->port(), SealedFrame(FrameFormat(77), 64, 3));
  EXPECT_EQ(PollFor(a.get(), 1), 1u);
  EXPECT_EQ(PollFor(a.get(), 1, nullptr, std::chrono::milliseconds(50)), 0u);
  EXPECT_EQ(a->counters().rejected[static_cast<size_t>(Reject::kMac)], 1u);
  EXPECT_EQ(a->counters().rejected[static_cast<size_t>(Reject::kJob)], 1u);
  // Per sender: peer 1's frame taken, peer 2's MAC failed, peer 3's unkeyed frame is foreign.
  std::map<PeerId, PeerCounters> by;
  for (const PeerCounters& p : a->peer_counters()) by[p.peer] = p;
  ASSERT_EQ(by.size(), 3u);
  EXPECT_EQ(by[1].received, 1u);
  EXPECT_EQ(by[1].rejected_total(), 0u);
  EXPECT_EQ(by[2].received, 0u);
  EXPECT_EQ(by[2].rejected[static_cast<size_t>(Reject::kMac)], 1u);
  EXPECT_EQ(by[3].rejected[static_cast<size_t>(Reject::kJob)], 1u);
  const std::vector<PeerCounters> sent = b->peer_counters();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].peer, 0);
  EXPECT_EQ(sent[0].sent, 1u);
  EXPECT_EQ(sent[0].bytes_sent, b->counters().bytes_sent);
}

TEST(UdpTransportTest, MulticastReachesEveryMember) {
  const uint32_t seed = TestSeed();
  const uint16_t port = static_cast<uint16_t>(30000 + seed % 20000);
  const std::string group = "239.255." + std::to_string(seed % 200 + 1) + "." + std::to_string(seed / 200 % 200 + 1);
  auto a = Open(0), b = Open(1), c = Open(2);
  if (!b->AddGroup(7, group, port, true) || !c->AddGroup(7, group, port, true))
    GTEST_SKIP() << "the kernel refused to join " << group << " on lo (no multicast here)";
  ASSERT_TRUE(a->AddGroup(7, group, port, false));
  b->AddPeer(0, "127.0.0.1", a->port());  // a receiver takes frames only from the job's peers
  c->AddPeer(0, "127.0.0.1", a->port());
  for (uint64_t s = 1; s <= 20; ++s) {
    Header h;
    h.kind = MsgKind::kPosition;
    h.seq = s;
    h.length = 16;
    const float p[4] = {1, 2, 3, 4};
    ASSERT_TRUE(test::Post(*a, Dest::Group(7), h, p));
  }
  a->Flush();
  std::vector<Header> at_b, at_c;
  EXPECT_EQ(PollFor(b.get(), 20, &at_b), 20u);
  EXPECT_EQ(PollFor(c.get(), 20, &at_c), 20u);
  ASSERT_FALSE(at_b.empty());
  EXPECT_EQ(at_b.back().seq, 20u);
  EXPECT_EQ(PollFor(a.get(), 1, nullptr, std::chrono::milliseconds(50)), 0u) << "the sender is no member";
  // A member's own send to the group comes back to it (loop on): dropped, not counted as a
  // stranger's.
  c->AddPeer(1, "127.0.0.1", b->port());
  Header h;
  h.kind = MsgKind::kPosition;
  h.seq = 99;
  h.length = 16;
  const float p[4] = {1, 2, 3, 4};
  ASSERT_TRUE(test::Post(*b, Dest::Group(7), h, p));
  b->Flush();
  EXPECT_EQ(PollFor(c.get(), 1), 1u);
  EXPECT_EQ(PollFor(b.get(), 1, nullptr, std::chrono::milliseconds(50)), 0u);
  EXPECT_EQ(b->counters().rejected_total(), 0u) << "its own looped-back send was counted as refused";
}

TEST(UdpTransportTest, PacingBoundsTheRate) {
  UdpOptions o = Opts();
  o.max_payload = 4096;
  o.send_slots = o.recv_slots = 128;
  o.max_batch = 8;
  o.pace_bytes_per_s = 2'000'000;
  auto a = Open(0, o), b = Open(1, o);
  a->AddPeer(1, "127.0.0.1", b->port());
  b->AddPeer(0, "127.0.0.1", a->port());
  const size_t kCount = 100;  // ~415 KB of frames: at least ~0.19 s at 2 MB/s after the first batch
  std::vector<std::byte> p(4096, std::byte{3});
  Header h;
  h.kind = MsgKind::kDelta;
  h.length = 4096 - kWireHeaderBytes;  // whole slots
  const auto t0 = Clock::now();
  size_t received = 0;
  Packet m[8];
  for (size_t sent = 0; (sent < kCount || received < kCount) && Clock::now() - t0 < std::chrono::seconds(10);) {
    if (sent < kCount && test::Post(*a, Dest::Peer(1), h, p.data())) ++sent;
    a->Flush();
    const size_t k = b->Poll(m, 8);
    b->Release(k);
    received += k;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(received, kCount);
  EXPECT_GE(secs, 0.15) << "faster than the pace allows";
  EXPECT_LT(secs, 2.0);
}

// Runs of equal frames to one peer go as GSO sends where the kernel has UDP_SEGMENT, and
// arrive as separate whole messages (the receiver does not ask for GRO); the same with GSO off.
// GSO on the sender and GRO on the receiver, each on and off: a run of frames arrives as
// separate whole messages, in order, every payload 16-aligned (lengths off 16 are padded on the
// wire), and all of them stay valid while held (released only at the end).
TEST(UdpTransportTest, GsoAndGroRunsArriveAsSeparateWholeAlignedMessages) {
  for (bool gso : {true, false}) {
    for (bool gro : {true, false}) {
      SCOPED_TRACE(testing::Message() << "gso " << gso << " gro " << gro);
      UdpOptions o = Opts();
      o.gso = gso;
      o.gro = gro;
      o.send_slots = o.recv_slots = 64;
      auto a = Open(0, o), b = Open(1, o);
      a->AddPeer(1, "127.0.0.1", b->port());
      b->AddPeer(0, "127.0.0.1", a->port());
      if (gso && !a->gso()) GTEST_SKIP() << "this kernel has no UDP GSO (UDP_SEGMENT)";
      if (gro && !b->gro()) GTEST_SKIP() << "this kernel has no UDP GRO (UDP_GRO)";
      const size_t kCount = 41;
      const uint32_t kLong = 1020, kShort = 96;  // 1020: a frame off 16 bytes, padded
      for (size_t i = 0; i < kCount; ++i) {
        std::byte* slot = a->AcquireSend();
        ASSERT_NE(slot, nullptr);
        const uint32_t length = i + 1 < kCount ? kLong : kShort;  // the last one shorter: still in the run
        for (uint32_t j = 0; j < length; ++j) slot[j] = static_cast<std::byte>((i + j) & 0xff);
        a->CommitSend(Dest::Peer(1), length);
      }
      a->Flush();
      EXPECT_EQ(a->gso_sends() >= 1, gso);
      const auto deadline = Clock::now() + std::chrono::seconds(5);
      std::vector<Packet> held;
      Packet m[8];
      while (held.size() < kCount && Clock::now() < deadline) {
        const size_t k = b->Poll(m, 8);
        held.insert(held.end(), m, m + k);
      }
      ASSERT_EQ(held.size(), kCount);
      size_t bad = 0, misaligned = 0;
      for (size_t i = 0; i < kCount; ++i) {
        bad += held[i].length != (i + 1 < kCount ? kLong : kShort) || held[i].source != 0;
        misaligned += reinterpret_cast<uintptr_t>(held[i].payload) % 16 != 0;
        for (uint32_t j = 0; j < held[i].length; ++j)  // the pattern of message i: in order
          bad += held[i].payload[j] != static_cast<std::byte>((i + j) & 0xff);
      }
      b->Release(kCount);
      EXPECT_EQ(bad, 0u);
      EXPECT_EQ(misaligned, 0u);
      EXPECT_EQ(b->counters().rejected_total(), 0u);
      if (gso && gro) {
        EXPECT_GE(b->gro_runs(), 1u) << "the run was not received coalesced";
      }
      if (!gro) {
        EXPECT_EQ(b->gro_runs(), 0u);
      }
      // The receive slots are all free again: another full burst fits.
      for (size_t i = 0; i < kCount; ++i) {
        Header h;
        h.kind = MsgKind::kPosition;
        h.seq = 100 + i;
        h.length = kShort;
        const std::vector<std::byte> p(kShort, std::byte{7});
        ASSERT_TRUE(test::Post(*a, Dest::Peer(1), h, p.data()));
      }
      a->Flush();
      EXPECT_EQ(PollFor(b.get(), kCount), kCount);
    }
  }
}

// Datagrams the kernel drops because the receive buffer is full are counted (SO_RXQ_OVFL):
// every datagram sent is either received or counted as dropped.
TEST(UdpTransportTest, KernelDropsAreCounted) {
  UdpOptions o = Opts();
  o.rcvbuf_bytes = 4096;  // a few datagrams at most
  auto a = Open(0), b = Open(1, o);
  a->AddPeer(1, "127.0.0.1", b->port());
  b->AddPeer(0, "127.0.0.1", a->port());
  const std::vector<std::byte> p(512, std::byte{1});
  Header h;
  h.kind = MsgKind::kDelta;
  h.length = 512;
  size_t sent = 0;
  for (int i = 0; i < 200; ++i) {
    if (test::Post(*a, Dest::Peer(1), h, p.data())) ++sent;
    a->Flush();
  }
  size_t received = PollFor(b.get(), sent, nullptr, std::chrono::milliseconds(300));
  // The count comes with the next datagram received: one more, once the buffer has room.
  ASSERT_TRUE(test::Post(*a, Dest::Peer(1), h, p.data()));
  a->Flush();
  ++sent;
  received += PollFor(b.get(), 1);
  const TransportCounters c = b->counters();
  EXPECT_GT(c.kernel_dropped, 0u) << "the buffer never overflowed";
  EXPECT_EQ(received + c.kernel_dropped, sent);
}

TEST(UdpTransportTest, WaitFdWakesPoll) {
  auto a = Open(0), b = Open(1);
  a->AddPeer(1, "127.0.0.1", b->port());
  b->AddPeer(0, "127.0.0.1", a->port());
  pollfd pfd{b->wait_fd(), POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 0), 0);  // nothing yet: an idle daemon would sleep here
  const float p = 1;
  Header h;
  h.length = 4;
  ASSERT_TRUE(test::Post(*a, Dest::Peer(1), h, &p));
  a->Flush();
  EXPECT_EQ(poll(&pfd, 1, 5000), 1);
  EXPECT_EQ(PollFor(b.get(), 1), 1u);
}

// A peer process that dies without a word (SIGKILL) is "peer down" within the timeout.
TEST(UdpTransportTest, KilledPeerProcessBecomesPeerDown) {
  UdpOptions o = Opts();
  o.peer_timeout_ms = 1000;  // generous: a busy CI machine may starve the live child a while
  auto a = Open(0, o);
  int ports[2];
  ASSERT_EQ(pipe(ports), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the peer: joins, then beats until killed (bounded: 20 s)
    close(ports[0]);
    auto b = Open(1);
    b->AddPeer(0, "127.0.0.1", a->port());
    const uint16_t port = b->port();
    if (write(ports[1], &port, sizeof port) != sizeof port) _exit(1);
    Header h;
    h.kind = MsgKind::kIteration;
    h.length = 4;
    const float p = 1;
    test::Post(*b, Dest::Peer(0), h, &p);
    const auto end = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < end) {
      b->Flush();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    _exit(0);
  }
  close(ports[1]);
  uint16_t port = 0;
  ASSERT_EQ(read(ports[0], &port, sizeof port), static_cast<ssize_t>(sizeof port));
  close(ports[0]);
  a->AddPeer(1, "127.0.0.1", port);
  std::vector<Header> got;
  const size_t joined = PollFor(a.get(), 1, &got);
  // Let it beat a while: a live peer is not down.
  const auto alive_until = Clock::now() + std::chrono::milliseconds(300);
  Packet m;
  while (Clock::now() < alive_until) {
    a->Release(a->Poll(&m, 1));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const bool ok_while_alive = a->status().ok();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_EQ(joined, 1u);
  ASSERT_EQ(got[0].kind, MsgKind::kIteration);
  EXPECT_EQ(got[0].source, 1);
  EXPECT_TRUE(ok_while_alive);
  const auto t0 = Clock::now();
  while (a->status().ok() && Clock::now() - t0 < std::chrono::seconds(6)) {
    a->Release(a->Poll(&m, 1));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const Status s = a->status();
  ASSERT_EQ(s.code, Status::kPeerDown) << "no peer-down within 6 s";
  EXPECT_EQ(s.peer, 1);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
}

// With `netns`, the sockets live in that namespace: two endpoints on the ends of a veth pair
// talk over it by the namespaces' own addresses (root only; skipped otherwise).
TEST(UdpTransportTest, EndpointsInTwoNamespacesTalkOverVeth) {
  if (const std::string why = test::TestNet::Unavailable(); !why.empty()) GTEST_SKIP() << why;
  test::VethPair net;
  UdpOptions oa = Opts(), ob = Opts();
  oa.netns = net.ns(0);
  oa.address = net.address(0);
  ob.netns = net.ns(1);
  ob.address = net.address(1);
  auto a = Open(0, oa), b = Open(1, ob);
  a->AddPeer(1, net.address(1), b->port());
  b->AddPeer(0, net.address(0), a->port());
  for (auto [from, to] : {std::pair{a.get(), b.get()}, std::pair{b.get(), a.get()}}) {
    Header h;
    h.kind = MsgKind::kDelta;
    h.length = 4;
    const float x = 1;
    ASSERT_TRUE(test::Post(*from, Dest::Peer(to->self()), h, &x));
    from->Flush();
    std::vector<Header> got;
    EXPECT_EQ(PollFor(to, 1, &got), 1u);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].source, from->self());
  }
  oa.port = 0;
  oa.netns = "";  // the caller's own namespace has no such address
  EXPECT_THROW(UdpEndpoint(2, oa), Error);
}

// heartbeat_ms 0 (what a job opens its transport with: its control messages decide who is
// alive): an idle endpoint sends nothing and never calls a silent peer down. With heartbeats (the
// control case) the same idle endpoint beats, and its silent peer is down within 10 beats.
TEST(UdpTransportTest, WithoutHeartbeatsAnIdleLinkIsQuietAndNoPeerGoesDown) {
  for (const uint32_t beat : {0u, 10u}) {
    SCOPED_TRACE(testing::Message() << "heartbeat_ms " << beat);
    UdpOptions o = Opts();
    o.heartbeat_ms = beat;
    o.peer_timeout_ms = 0;
    auto a = Open(0, o);
    test::Forger peer;
    ASSERT_TRUE(peer.ok());
    a->AddPeer(1, "127.0.0.1", peer.port());
    ASSERT_TRUE(peer.SendBytes(a->port(), SealedFrame(FrameFormat(77), 16, 1)));  // a hears peer 1 once
    ASSERT_EQ(PollFor(a.get(), 1), 1u);
    // Without beats: 300 ms of an idle daemon. With them: until the peer is down and a few beats
    // went out, within a deadline (a busy host may stall this thread for a while).
    size_t datagrams = 0;
    const auto start = Clock::now();
    const auto until = start + std::chrono::milliseconds(beat == 0 ? 300 : 10000);
    Packet m[8];
    while (Clock::now() < until) {  // an idle daemon: Flush and Poll
      a->Flush();
      a->Release(a->Poll(m, 8));
      datagrams += peer.Count(std::chrono::milliseconds(2));
      if (beat != 0 && datagrams > 5 && !a->status().ok() && Clock::now() - start > std::chrono::milliseconds(300))
        break;
    }
    if (beat == 0) {
      EXPECT_EQ(datagrams, 0u) << "heartbeats went out";
      EXPECT_TRUE(a->status().ok()) << a->status().what;
    } else {
      EXPECT_GT(datagrams, 5u) << "no heartbeats";
      EXPECT_EQ(a->status().code, Status::kPeerDown);
    }
  }
  UdpOptions o = Opts();
  o.heartbeat_ms = 0;
  o.peer_timeout_ms = 100;  // a timeout without heartbeats would call every idle peer down
  EXPECT_THROW(UdpEndpoint(0, o), Error);
}

TEST(UdpTransportTest, BadSettingsAreOneLineErrors) {
  UdpOptions o = Opts();
  o.max_payload = 70000;
  EXPECT_THROW(UdpEndpoint(0, o), Error);
  o = Opts();
  o.address = "not-an-address";
  try {
    UdpEndpoint e(0, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not-an-address"), std::string::npos) << e.what();
  }
  auto a = Open(0);
  o = Opts();
  o.port = a->port();  // taken
  EXPECT_THROW(UdpEndpoint(1, o), Error);
  EXPECT_THROW(a->AddGroup(1, "127.0.0.1", 5000, false), Error);  // not multicast
  std::byte* s = a->AcquireSend();
  ASSERT_NE(s, nullptr);
  EXPECT_THROW(a->CommitSend(Dest::Peer(9), 0), Error);  // no address for that peer
}

}  // namespace
}  // namespace hogstream
