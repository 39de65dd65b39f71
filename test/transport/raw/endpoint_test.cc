// Tests of transport/raw beyond the typed ones (test/transport/transport_test.cc), over veth
// links between network namespaces made for each test (test/transport/veth.hpp; root only,
// skipped with the reason otherwise): messages of random lengths arrive whole both ways at MTU
// 1500 and at the largest payload of MTU 9000; foreign, corrupt, short, oversized and
// unknown-version frames injected with a plain AF_PACKET socket are counted per reason and
// dropped, frames of another ethertype or to another MAC never show; frames from unknown MACs
// are dropped and the source comes from the MAC, never the frame; a group MAC and broadcast
// reach every member on a bridge and nobody else; keyed endpoints refuse unkeyed frames and
// other keys; held messages survive the ring filling up; payloads that land off 16 bytes are
// realigned; wait_fd wakes a poll(); a SIGKILLed peer process becomes "peer down"; no
// CAP_NET_RAW, bad MACs, a missing interface or namespace and a payload the MTU cannot carry
// are one-line Errors. Traffic: only inside those namespaces, bounded in count and time; every
// wait has a deadline.
#include "transport/raw/endpoint.hpp"

#include "base/common.hpp"
#include "transport/frame.hpp"
#include "transport/netns.hpp"

#include "test/test_seed.hpp"
#include "test/transport/transport_test_util.hpp"
#include "test/transport/veth.hpp"
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <linux/capability.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <random>
#include <thread>
#include <vector>

namespace hogstream {
namespace HS_UNITY_ID {

using test::PollFor;
using test::SealedFrame;

// The sync message a packet holds (the tests send sync's messages: transport_test_util.hpp).
Message M(const Packet& p) { return MessageOf(p); }

using Clock = std::chrono::steady_clock;
using test::TestNet;
using test::VethBridge;
using test::VethPair;

#define SKIP_WITHOUT_NETNS()                                                     \
  do {                                                                           \
    if (const std::string why = TestNet::Unavailable(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)

// The tests' settings: job 77, fast heartbeats, a 200 ms peer timeout.
RawOptions Opts() {
  RawOptions o;
  o.job = 77;
  o.heartbeat_ms = 10;
  o.peer_timeout_ms = 200;
  return o;
}
// `o` on host `host` of `net`.
RawOptions On(const TestNet& net, int host, RawOptions o = Opts()) {
  o.netns = net.ns(host);
  o.iface = net.iface(host);
  return o;
}

struct Pair {
  std::unique_ptr<RawEndpoint> a, b;  // peer 0 on host 0, peer 1 on host 1, each knowing the other
};
Pair Open(const TestNet& net, const RawOptions& o = Opts()) {
  Pair p;
  p.a = std::make_unique<RawEndpoint>(0, On(net, 0, o));
  p.b = std::make_unique<RawEndpoint>(1, On(net, 1, o));
  p.a->AddPeer(1, p.b->mac());
  p.b->AddPeer(0, p.a->mac());
  return p;
}

// A plain AF_PACKET socket on one host of a test network: sends any Ethernet frame we make.
class Injector {
 public:
  Injector(const TestNet& net, int host) {
    NetnsScope in(net.ns(host));
    fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
    ifindex_ = static_cast<int>(if_nametoindex(net.iface(host).c_str()));
  }
  ~Injector() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0 && ifindex_ > 0; }
  // Ethernet header (dst, src, type) + `frame`.
  void Send(const Mac& dst, const Mac& src, const std::vector<std::byte>& frame, uint16_t type = 0x88B5) {
    std::vector<std::byte> wire(14 + frame.size());
    std::memcpy(wire.data(), dst.data(), 6);
    std::memcpy(wire.data() + 6, src.data(), 6);
    const uint16_t t = htons(type);
    std::memcpy(wire.data() + 12, &t, 2);
    std::memcpy(wire.data() + 14, frame.data(), frame.size());
    sockaddr_ll to{};
    to.sll_family = AF_PACKET;
    to.sll_ifindex = ifindex_;
    to.sll_halen = 6;
    std::memcpy(to.sll_addr, dst.data(), 6);
    EXPECT_EQ(sendto(fd_, wire.data(), wire.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
              static_cast<ssize_t>(wire.size()))
        << ErrnoText(errno);
  }

 private:
  int fd_ = -1, ifindex_ = 0;
};

uint64_t Rejected(const Transport& t, Reject r) { return t.counters().rejected[static_cast<size_t>(r)]; }

// Random lengths (0 to max_payload, whole floats) and random bytes, in batches of random size,
// both ways at once; each message arrives once with its header and every byte.
void ExchangeRandomMessages(RawEndpoint* a, RawEndpoint* b, int rounds, bool longest_often) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 gen(seed);
  const uint32_t max = a->caps().max_payload - kWireHeaderBytes;  // sync's messages (transport_test_util.hpp)
  struct Sent {
    uint32_t length;
    uint32_t chunk;
    std::vector<std::byte> bytes;
  };
  std::map<uint64_t, Sent> want[2];  // per receiver: seq -> what was sent
  uint64_t seq = 0;
  RawEndpoint* ends[2] = {a, b};
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  for (int r = 0; r < rounds; ++r) {
    for (int from = 0; from < 2; ++from) {
      RawEndpoint* s = ends[from];
      const int batch = 1 + static_cast<int>(gen() % 16);
      for (int k = 0; k < batch; ++k) {
        std::byte* slot = s->AcquireSend();
        ASSERT_NE(slot, nullptr);
        ASSERT_EQ(reinterpret_cast<uintptr_t>(slot) % 16, 0u);
        const uint32_t len = longest_often && gen() % 2 ? max : (gen() % (max / 4 + 1)) * 4;
        Sent sent{len, static_cast<uint32_t>(gen()), std::vector<std::byte>(len)};
        for (auto& x : sent.bytes) x = static_cast<std::byte>(gen());
        if (len) std::memcpy(slot + kWireHeaderBytes, sent.bytes.data(), len);  // (an empty vector has no data())
        Header h;
        h.kind = gen() % 2 ? MsgKind::kPosition : MsgKind::kDelta;
        h.chunk = sent.chunk;
        h.seq = ++seq;
        h.clock = seq * 3 + 1;
        h.epoch = 9;
        h.length = len;
        test::Commit(*s, slot, Dest::Peer(ends[1 - from]->self()), h);
        want[1 - from].emplace(seq, std::move(sent));
      }
      s->Flush();
    }
    for (int to = 0; to < 2; ++to) {
      Packet m[8];
      while (!want[to].empty()) {
        ASSERT_LT(Clock::now(), deadline) << want[to].size() << " messages never arrived at peer " << to;
        ends[1 - to]->Flush();  // anything the kernel refused earlier
        const size_t n = ends[to]->Poll(m, 8);
        for (size_t i = 0; i < n; ++i) {
          const Message got = MessageOf(m[i]);
          const Header& h = got.h;
          auto it = want[to].find(h.seq);
          ASSERT_NE(it, want[to].end()) << "seq " << h.seq << " arrived twice or was never sent";
          EXPECT_EQ(h.source, ends[1 - to]->self());
          EXPECT_EQ(h.length, it->second.length);
          EXPECT_EQ(h.chunk, it->second.chunk);
          EXPECT_EQ(h.clock, h.seq * 3 + 1);
          EXPECT_EQ(h.epoch, 9u);
          EXPECT_EQ(reinterpret_cast<uintptr_t>(m[i].payload) % 16, 0u);
          EXPECT_TRUE(h.length == 0 || std::memcmp(got.payload, it->second.bytes.data(), h.length) == 0)
              << "seq " << h.seq;
          want[to].erase(it);
        }
        ends[to]->Release(n);
        if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
  }
  for (RawEndpoint* e : ends) {
    EXPECT_EQ(e->counters().rejected_total(), 0u);
    EXPECT_EQ(e->unknown_sources(), 0u);
    EXPECT_EQ(e->realigned(), 0u) << "our padding should keep every payload on 16 bytes";
    EXPECT_TRUE(e->status().ok()) << e->status().what;
  }
  EXPECT_EQ(a->counters().sent + b->counters().sent, seq);
  EXPECT_EQ(a->counters().received + b->counters().received, seq);
}

TEST(RawTransportTest, MessagesArriveWholeBothWaysAtMtu1500) {
  SKIP_WITHOUT_NETNS();
  VethPair net(1500);
  auto p = Open(net);
  EXPECT_EQ(p.a->mtu(), 1500u);
  EXPECT_EQ(p.a->caps().max_payload, 1456u);  // 1500 - 40 bytes of frame, down to 16 (its 1 byte of pad fits)
  EXPECT_TRUE(p.a->caps().multicast);
  EXPECT_NE(p.a->mac(), p.b->mac());
  ExchangeRandomMessages(p.a.get(), p.b.get(), 40, false);
}

TEST(RawTransportTest, Mtu9000CarriesTheLargestPayload) {
  SKIP_WITHOUT_NETNS();
  VethPair net(9000);
  for (bool keyed : {false, true}) {
    SCOPED_TRACE(keyed ? "keyed" : "unkeyed");
    RawOptions o = Opts();
    if (keyed) o.key = JobKey{1, 2, 3};
    auto p = Open(net, o);
    const uint32_t max = p.a->caps().max_payload;
    const size_t overhead = FrameFormat(77, o.key).overhead();
    EXPECT_EQ(max % 16, 0u);
    EXPECT_LE(max + overhead, 9000u);
    EXPECT_GT(max + overhead + 16 + 1, 9000u) << "more room than " << max << " bytes was left unused";
    ExchangeRandomMessages(p.a.get(), p.b.get(), 10, true);
  }
}

TEST(RawTransportTest, BadFramesAreCountedPerReasonAndDropped) {
  SKIP_WITHOUT_NETNS();
  VethPair net(1500);
  RawOptions o = Opts();
  o.max_payload = 512;
  auto p = Open(net, o);
  Injector inject(net, 0);  // on host 0: frames from a's MAC, a known peer of b
  ASSERT_TRUE(inject.ok());
  const Mac to = p.b->mac(), from = p.a->mac();
  const FrameFormat ours(77), theirs(78);
  inject.Send(to, from, SealedFrame(theirs, 64));  // another job
  auto corrupt = SealedFrame(ours, 64);
  corrupt[60] ^= std::byte{4};
  inject.Send(to, from, corrupt);
  inject.Send(to, from, std::vector<std::byte>(10, std::byte{0}));  // short
  inject.Send(to, from, SealedFrame(ours, 1024));                          // over max_payload (512)
  auto lying = SealedFrame(ours, 64);
  lying.resize(lying.size() + 40);  // 40 bytes more than its length field says: no padding of ours
  inject.Send(to, from, lying);
  auto version = SealedFrame(ours, 64);
  version[4] = std::byte{9};
  inject.Send(to, from, version);
  auto magic = SealedFrame(ours, 64);
  magic[0] = std::byte{'X'};
  inject.Send(to, from, magic);
  inject.Send(to, from, SealedFrame(ours, 64), 0x88B6);  // another ethertype: never reaches the socket
  inject.Send(ParseMac("02:00:00:00:00:42"), from, SealedFrame(ours, 64));  // to another host's MAC
  inject.Send(to, from, SealedFrame(ours, 64, /*claimed=*/42));  // a good frame from a's MAC claiming to be 42
  inject.Send(to, from, SealedFrame(ours, 64, /*claimed=*/0));   // the one good frame
  std::vector<Header> got;
  EXPECT_EQ(PollFor(p.b.get(), 1, &got), 1u);
  EXPECT_EQ(PollFor(p.b.get(), 1, nullptr, std::chrono::milliseconds(50)), 0u) << "a bad frame was delivered";
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].source, 0);
  EXPECT_EQ(Rejected(*p.b, Reject::kJob), 1u);
  EXPECT_EQ(Rejected(*p.b, Reject::kChecksum), 1u);
  EXPECT_EQ(Rejected(*p.b, Reject::kShort), 1u);
  EXPECT_EQ(Rejected(*p.b, Reject::kLength), 2u);
  EXPECT_EQ(Rejected(*p.b, Reject::kVersion), 1u);
  EXPECT_EQ(Rejected(*p.b, Reject::kMagic), 1u);
  EXPECT_EQ(Rejected(*p.b, Reject::kSender), 1u);
  EXPECT_EQ(p.b->counters().rejected_total(), 8u);
  EXPECT_EQ(p.b->counters().received, 1u);
  EXPECT_EQ(p.b->unknown_sources(), 0u);
  EXPECT_TRUE(p.b->status().ok());
}

// The source of a message is the peer that owns the sending MAC: frames from MACs that are no
// peer are counted and dropped, and so is a frame from a peer's MAC that claims to be another
// peer (a forgery, or machines whose lists disagree).
TEST(RawTransportTest, SourceComesFromTheMacAndUnknownMacsAreDropped) {
  SKIP_WITHOUT_NETNS();
  VethPair net(1500);
  Pair p;
  p.a = std::make_unique<RawEndpoint>(0, On(net, 0));  // stamps 0 in its frames
  p.b = std::make_unique<RawEndpoint>(1, On(net, 1));
  p.a->AddPeer(1, p.b->mac());
  p.b->AddPeer(0, p.a->mac());
  Injector inject(net, 0);
  ASSERT_TRUE(inject.ok());
  const Mac stranger = ParseMac("02:00:00:00:00:99");
  inject.Send(p.b->mac(), stranger, SealedFrame(FrameFormat(77), 64));
  inject.Send(p.b->mac(), stranger, SealedFrame(FrameFormat(77), 16));
  inject.Send(p.b->mac(), p.a->mac(), SealedFrame(FrameFormat(77), 16, /*claimed=*/5));
  const float x = 1;
  Header h;
  h.kind = MsgKind::kDelta;
  h.length = 4;
  ASSERT_TRUE(test::Post(*p.a, Dest::Peer(1), h, &x));
  p.a->Flush();
  std::vector<Header> got;
  EXPECT_EQ(PollFor(p.b.get(), 1, &got), 1u);
  EXPECT_EQ(PollFor(p.b.get(), 1, nullptr, std::chrono::milliseconds(50)), 0u);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].source, 0);
  EXPECT_EQ(p.b->unknown_sources(), 2u);
  EXPECT_EQ(Rejected(*p.b, Reject::kSender), 3u);
  EXPECT_EQ(p.b->counters().rejected_total(), 3u);
}

TEST(RawTransportTest, KeyedEndpointsRefuseUnkeyedAndOtherKeys) {
  SKIP_WITHOUT_NETNS();
  VethPair net(1500);
  RawOptions o = Opts();
  JobKey k{};
  k[3] = 1;
  o.key = k;
  auto p = Open(net, o);
  JobKey other = k;
  other[3] = 2;
  Injector inject(net, 1);  // from b's MAC
  ASSERT_TRUE(inject.ok());
  inject.Send(p.a->mac(), p.b->mac(), SealedFrame(FrameFormat(77), 64));         // unkeyed
  inject.Send(p.a->mac(), p.b->mac(), SealedFrame(FrameFormat(77, other), 64));  // another key
  const float x = 1;
  Header h;
  h.kind = MsgKind::kDelta;
  h.length = 4;
  ASSERT_TRUE(test::Post(*p.b, Dest::Peer(0), h, &x));
  p.b->Flush();
  EXPECT_EQ(PollFor(p.a.get(), 1), 1u);
  EXPECT_EQ(PollFor(p.a.get(), 1, nullptr, std::chrono::milliseconds(50)), 0u);
  EXPECT_EQ(Rejected(*p.a, Reject::kMac), 1u);
  EXPECT_EQ(Rejected(*p.a, Reject::kJob), 1u);
}

// Three hosts on a bridge: a group MAC reaches both members, broadcast reaches the one that
// joined it; the sender gets neither back.
TEST(RawTransportTest, GroupAndBroadcastReachEveryMember) {
  SKIP_WITHOUT_NETNS();
  VethBridge net(3, 1500);
  std::unique_ptr<RawEndpoint> e[3];
  for (int i = 0; i < 3; ++i) e[i] = std::make_unique<RawEndpoint>(i, On(net, i));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      if (i != j) e[i]->AddPeer(j, e[j]->mac());
  const Mac group = ParseMac("03:00:00:00:00:07");
  e[0]->AddGroup(7, group, false);
  e[0]->AddGroup(8, kBroadcastMac, false);
  e[1]->AddGroup(7, group);
  e[1]->AddGroup(8, kBroadcastMac);
  e[2]->AddGroup(7, group);  // not broadcast
  for (uint64_t s = 1; s <= 30; ++s) {
    Header h;
    h.kind = MsgKind::kPosition;
    h.seq = s;
    h.length = 16;
    const float v[4] = {1, 2, 3, 4};
    ASSERT_TRUE(test::Post(*e[0], Dest::Group(s <= 20 ? 7 : 8), h, v));
    if (s % 8 == 0) e[0]->Flush();
  }
  e[0]->Flush();
  std::vector<Header> at1, at2;
  EXPECT_EQ(PollFor(e[1].get(), 30, &at1), 30u);
  EXPECT_EQ(PollFor(e[2].get(), 20, &at2), 20u);
  EXPECT_EQ(PollFor(e[2].get(), 1, nullptr, std::chrono::milliseconds(100)), 0u) << "broadcast reached a non-member";
  EXPECT_EQ(PollFor(e[0].get(), 1, nullptr, std::chrono::milliseconds(50)), 0u) << "the sender got its own frames";
  for (size_t i = 0; i < at1.size(); ++i) {
    EXPECT_EQ(at1[i].seq, i + 1);
    EXPECT_EQ(at1[i].source, 0);
  }
  for (size_t i = 0; i < at2.size(); ++i) EXPECT_EQ(at2[i].seq, i + 1);
}

TEST(RawTransportTest, WaitFdWakesPoll) {
  SKIP_WITHOUT_NETNS();
  VethPair net(1500);
  auto p = Open(net);
  // b hears nothing of a until a sends: no Flush or AcquireSend of a has run (no heartbeat).
  pollfd pfd{p.b->wait_fd(), POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 20), 0);  // nothing yet: an idle daemon would sleep here
  const float x = 1;
  Header h;
  h.length = 4;
  ASSERT_TRUE(test::Post(*p.a, Dest::Peer(1), h, &x));
  p.a->Flush();
  EXPECT_EQ(poll(&pfd, 1, 5000), 1);
  std::vector<Header> got;
  EXPECT_EQ(PollFor(p.b.get(), 1, &got), 1u);
}

// A peer process that dies without a word (SIGKILL) is "peer down" within the timeout.
TEST(RawTransportTest, KilledPeerProcessBecomesPeerDown) {
  SKIP_WITHOUT_NETNS();
  VethPair net(1500);
  RawOptions oa = On(net, 0), ob = On(net, 1);
  oa.peer_timeout_ms = 1000;  // generous: a busy CI machine may starve the live child a while
  auto a = std::make_unique<RawEndpoint>(0, oa);
  const Mac a_mac = a->mac();
  int macs[2];
  ASSERT_EQ(pipe(macs), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the peer: joins, then beats until killed (bounded: 20 s). Never returns.
    close(macs[0]);
    try {
      RawEndpoint b(1, ob);
      b.AddPeer(0, a_mac);
      const Mac mine = b.mac();
      if (write(macs[1], mine.data(), 6) != 6) _exit(1);
      Header h;
      h.kind = MsgKind::kIteration;
      h.length = 4;
      const float x = 1;
      test::Post(b, Dest::Peer(0), h, &x);
      const auto end = Clock::now() + std::chrono::seconds(20);
      while (Clock::now() < end) {
        b.Flush();
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    } catch (...) {
      _exit(2);
    }
    _exit(0);
  }
  close(macs[1]);
  Mac b_mac{};
  pollfd pfd{macs[0], POLLIN, 0};
  const bool told = poll(&pfd, 1, 10000) == 1 && read(macs[0], b_mac.data(), 6) == 6;
  close(macs[0]);
  if (!told) {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    FAIL() << "the peer process never told its MAC";
  }
  a->AddPeer(1, b_mac);
  std::vector<Header> got;
  const size_t joined = PollFor(a.get(), 1, &got);
  const auto alive_until = Clock::now() + std::chrono::milliseconds(300);  // a live peer is not down
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
  EXPECT_TRUE(ok_while_alive) << a->status().what;
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

// Messages held (polled, not released) keep their bytes while the sender goes on past the
// ring's size: the kernel stops at the first block still held and drops (counted) instead of
// writing over it; after the Release the link carries traffic again.
TEST(RawTransportTest, HeldMessagesStayValidUntilReleased) {
  SKIP_WITHOUT_NETNS();
  VethPair net(1500);
  RawOptions o = Opts();
  o.recv_block_bytes = 4096;  // at most two full-size frames per block
  o.recv_blocks = 8;
  o.send_slots = 8;
  auto p = Open(net, o);
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 gen(seed);
  const uint32_t len = p.a->caps().max_payload - kWireHeaderBytes;  // full-size frames
  uint64_t seq = 0;
  std::map<uint64_t, std::vector<std::byte>> sent;
  auto send = [&](int count) {
    for (int k = 0; k < count; ++k) {
      std::byte* slot = p.a->AcquireSend();
      ASSERT_NE(slot, nullptr);
      std::vector<std::byte> bytes(len);
      for (auto& x : bytes) x = static_cast<std::byte>(gen());
      std::memcpy(slot + kWireHeaderBytes, bytes.data(), len);
      Header h;
      h.kind = MsgKind::kDelta;
      h.seq = ++seq;
      h.length = len;
      test::Commit(*p.a, slot, Dest::Peer(1), h);
      sent[seq] = std::move(bytes);
    }
    p.a->Flush();
  };
  auto intact = [&](const Packet& pk) {
    const Message m = M(pk);
    return std::memcmp(m.payload, sent.at(m.h.seq).data(), len) == 0;
  };
  // Hold 6 messages: 3 to 6 of the 8 blocks.
  send(6);
  std::vector<Packet> held;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (held.size() < 6) {
    ASSERT_LT(Clock::now(), deadline) << 6 - held.size() << " of the first messages never arrived";
    Packet m[8];
    const size_t n = p.b->Poll(m, 8);
    held.insert(held.end(), m, m + n);
    if (!n) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  // 48 more frames (24+ blocks: the ring three times over), all read and held too.
  for (int batch = 0; batch < 12; ++batch) {
    send(4);
    const auto until = Clock::now() + std::chrono::milliseconds(20);
    while (Clock::now() < until) {
      Packet m[8];
      held.insert(held.end(), m, m + p.b->Poll(m, 8));
    }
  }
  for (const Packet& m : held) EXPECT_TRUE(intact(m)) << "held message " << M(m).h.seq << " was overwritten";
  EXPECT_LT(held.size(), 6u + 48u) << "the ring never filled up";
  EXPECT_GT(p.b->kernel_drops(), 0u);
  // Let go: the kernel moves on, and new frames arrive again.
  p.b->Release(held.size());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Packet m[8];
  p.b->Release(p.b->Poll(m, 8));  // whatever got in as the kernel moved on
  const uint64_t before = seq;
  send(6);
  std::vector<Header> got;
  EXPECT_EQ(PollFor(p.b.get(), 6, &got), 6u) << "the link did not recover after the Release";
  for (const Header& h : got) EXPECT_GT(h.seq, before);
}

// Frames from a sender that does not pad like ours land off 16 bytes in the ring: their
// payloads are copied to aligned bounce slots, and with every bounce slot held Poll waits for a
// Release instead of handing out more.
TEST(RawTransportTest, MisalignedPayloadsAreCopiedToAlignedSlots) {
  SKIP_WITHOUT_NETNS();
  VethPair net(1500);
  RawOptions o = Opts();
  o.max_batch = 4;  // 4 bounce slots
  auto p = Open(net, o);
  Injector inject(net, 0);
  ASSERT_TRUE(inject.ok());
  const FrameFormat fmt(77);
  const int kCount = 40;
  for (int i = 0; i < kCount; ++i) {
    // No padding: a message with no values (a 72-byte frame) puts the next ring entry 8 bytes
    // off 16.
    const uint32_t len = i % 2 ? 32 : 0;
    std::vector<std::byte> f(kWireHeaderBytes + len + fmt.overhead());
    const size_t values = FrameFormat::kHeaderBytes + kWireHeaderBytes;
    for (uint32_t j = 0; j < len; ++j) f[values + j] = static_cast<std::byte>(i * 7 + j);
    Header h;
    h.kind = MsgKind::kDelta;
    h.seq = i + 1;
    h.length = len;
    PutHeader(f.data() + FrameFormat::kHeaderBytes, h);
    fmt.Seal(f.data(), FrameHeader{FrameType::kData, 0, kWireHeaderBytes + len});  // a's, whose MAC sends it
    inject.Send(p.b->mac(), p.a->mac(), f);
  }
  size_t got = 0, bad = 0;
  auto check = [&](const Packet& pk) {
    const Message x = M(pk);
    bad += x.h.seq != got + 1 || reinterpret_cast<uintptr_t>(pk.payload) % 16 != 0;
    for (uint32_t j = 0; j < x.h.length; ++j) bad += x.payload[j] != static_cast<std::byte>(got * 7 + j);
    ++got;
  };
  // Hold everything Poll gives: it stops at the fifth off-16 payload (about every other frame).
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // every block handed over
  size_t held = 0;
  for (int idle = 0; idle < 3;) {
    Packet m[8];
    const size_t n = p.b->Poll(m, 8);
    for (size_t i = 0; i < n; ++i) check(m[i]);
    held += n;
    idle = n ? 0 : idle + 1;
  }
  EXPECT_LT(held, static_cast<size_t>(kCount)) << "Poll handed out more bounced payloads than it has slots";
  EXPECT_EQ(p.b->realigned(), 4u);
  p.b->Release(held);
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (got < kCount && Clock::now() < deadline) {
    Packet m[8];
    const size_t n = p.b->Poll(m, 8);
    for (size_t i = 0; i < n; ++i) check(m[i]);
    p.b->Release(n);
  }
  EXPECT_EQ(got, static_cast<size_t>(kCount));
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(p.b->realigned(), 4u);
  EXPECT_EQ(p.b->counters().rejected_total(), 0u);
}

bool OneLine(const std::string& s) { return !s.empty() && s.find('\n') == std::string::npos; }

// Without CAP_NET_RAW (a forked child drops it; an unprivileged user never had it) Open is one
// line that says what is missing and what to use instead. Runs as anyone.
TEST(RawTransportTest, WithoutCapNetRawOpenIsOneLineError) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(out[0]);
    std::string said;
    int rc = 0;
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct caps[2]{};
    if (syscall(SYS_capget, &hdr, caps) != 0) _exit(3);
    caps[0].effective &= ~(1u << CAP_NET_RAW);
    caps[0].permitted &= ~(1u << CAP_NET_RAW);
    caps[0].inheritable &= ~(1u << CAP_NET_RAW);
    if (syscall(SYS_capset, &hdr, caps) != 0) _exit(4);
    try {
      RawOptions o;
      o.iface = "lo";
      RawDevice(o).Open(0);
      said = "no error";
      rc = 1;
    } catch (const Error& e) {
      said = e.what();
    } catch (const std::exception& e) {
      said = std::string("not an Error: ") + e.what();
      rc = 2;
    }
    if (write(out[1], said.data(), said.size()) < 0) rc = 5;
    _exit(rc);
  }
  close(out[1]);
  std::string said;
  char buf[512];
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (;;) {
    pollfd pfd{out[0], POLLIN, 0};
    if (Clock::now() > deadline || poll(&pfd, 1, 100) < 0) break;
    if (!(pfd.revents & (POLLIN | POLLHUP))) continue;
    const ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    said.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  int status = 0;
  if (waitpid(child, &status, WNOHANG) != child) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << said;
  EXPECT_TRUE(OneLine(said)) << said;
  EXPECT_NE(said.find("CAP_NET_RAW"), std::string::npos) << said;
  EXPECT_NE(said.find("--transport=udp"), std::string::npos) << said;
}

TEST(RawTransportTest, MacTextParsesBothFormsAndRefusesOthers) {
  const Mac m = ParseMac("0025908a56d8");
  EXPECT_EQ(m, (Mac{0x00, 0x25, 0x90, 0x8a, 0x56, 0xd8}));
  EXPECT_EQ(ParseMac("00:25:90:8A:56:D8"), m);
  EXPECT_EQ(FormatMac(m), "00:25:90:8a:56:d8");
  EXPECT_EQ(ParseMac(FormatMac(kBroadcastMac)), kBroadcastMac);
  for (const char* bad : {"", "0025908a56d", "0025908a56d8a", "00:25:90:8a:56", "00-25-90-8a-56-d8",
                          "0025908a56dg", "00:25:90:8a:56:d8:", "00:25:9:08a:56:d8", " 0025908a56d8"}) {
    try {
      ParseMac(bad);
      ADD_FAILURE() << "'" << bad << "' parsed";
    } catch (const Error& e) {
      EXPECT_TRUE(OneLine(e.what())) << e.what();
      EXPECT_NE(std::string(e.what()).find("'" + std::string(bad) + "'"), std::string::npos) << e.what();
    }
  }
}

// Runs `f`, expects an Error of one line containing `needle`.
template <class F>
void ExpectOneLineError(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error (wanted one naming '" << needle << "')";
  } catch (const Error& e) {
    EXPECT_TRUE(OneLine(e.what())) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(RawTransportTest, BadSettingsAreOneLineErrors) {
  SKIP_WITHOUT_NETNS();
  VethPair net(1500);
  RawOptions o = On(net, 0);
  o.iface = "hsnosuch0";
  ExpectOneLineError([&] { RawEndpoint(0, o); }, "'hsnosuch0'");
  o = On(net, 0);
  o.iface = "lo";
  ExpectOneLineError([&] { RawEndpoint(0, o); }, "not an Ethernet interface");
  o = On(net, 0);
  o.max_payload = 4096;
  ExpectOneLineError([&] { RawEndpoint(0, o); }, "MTU 1500");
  o.max_payload = 1472;  // 1500 - 40 rounded up: no room for the frame
  ExpectOneLineError([&] { RawEndpoint(0, o); }, "MTU 1500");
  o.max_payload = 100;
  ExpectOneLineError([&] { RawEndpoint(0, o); }, "multiple of 16");
  o = On(net, 0);
  o.netns = "hs-no-such-namespace";
  ExpectOneLineError([&] { RawEndpoint(0, o); }, "'hs-no-such-namespace'");
  o = On(net, 0);
  o.recv_block_bytes = 3 << 20;
  ExpectOneLineError([&] { RawEndpoint(0, o); }, "1 MiB");
  auto p = Open(net);
  ExpectOneLineError([&] { p.a->AddGroup(3, ParseMac("02:00:00:00:00:01")); }, "02:00:00:00:00:01");
  ExpectOneLineError([&] { p.a->AddGroup(3, ParseMac("01:00:5e:00:00:01")); }, "locally administered");
  ExpectOneLineError([&] { p.a->AddPeer(4, ParseMac("03:00:00:00:00:01")); }, "group address");
  ExpectOneLineError([&] { p.a->AddPeer(4, p.b->mac()); }, "already peer 1");
  ASSERT_NE(p.a->AcquireSend(), nullptr);
  ExpectOneLineError([&] { p.a->CommitSend(Dest::Peer(9), 0); }, "peer 9");
  ExpectOneLineError([&] { p.a->CommitSend(Dest::Group(9), 0); }, "group 9");
}

}  // namespace
}  // namespace hogstream
