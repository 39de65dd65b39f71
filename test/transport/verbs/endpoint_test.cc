// Tests of transport/verbs beyond the typed ones (test/transport/transport_test.cc), over the
// in-process fake verbs fabric (fake_verbs.hpp; this host can have no RDMA device): whole
// messages both ways over InfiniBand-like and RoCE-like ports; bad frames counted per reason;
// a queue pair that is no peer is dropped whatever its frames claim; multicast reaches every
// member; receive buffers go back only at Release; selective signalling frees slots; wait_fd
// wakes a poll(); error completions and failed posts latch kIoError in one line; a closed peer
// becomes "peer down"; no device / no library / bad settings are one-line Errors; every
// endpoint leaves the fabric as it found it (no object alive, no misuse).
// VerbsOnHardware.* run the same exchange over VerbsApi::System() and skip, saying so, where
// no RDMA device is listed (here: always).
#ifdef HOGSTREAM_VERBS

#include "test/error_of.hpp"
#include "transport/verbs/endpoint.hpp"

#include "base/common.hpp"
#include "transport/frame.hpp"
#include "transport/verbs/device.hpp"

#include "test/test_seed.hpp"
#include "test/transport/transport_test_util.hpp"
#include "test/transport/verbs/fake_verbs.hpp"
#include <gtest/gtest.h>

#include <errno.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <random>
#include <thread>
#include <vector>

namespace hogstream {
namespace HS_UNITY_ID {

using test::PollFor;

using Clock = std::chrono::steady_clock;
constexpr uint32_t kJob = 77;

// Two devices ("fake0", "fake1": two hosts), one port each: InfiniBand (LIDs 1, 2) or RoCE
// (LID 0, routed by GID).
FakeVerbs::Options Fabric(bool ethernet = false) {
  FakeVerbs::Options o;
  for (int d = 0; d < 2; ++d) {
    FakeVerbs::Port p;
    p.ethernet = ethernet;
    p.lid = ethernet ? 0 : static_cast<uint16_t>(d + 1);
    if (ethernet) {  // ::ffff:10.0.0.d, as RoCE v2 over IPv4 has it
      p.gid[10] = p.gid[11] = 0xff;
      p.gid[12] = 10;
      p.gid[15] = static_cast<uint8_t>(d + 1);
    } else {
      p.gid[0] = 0xfe;
      p.gid[1] = 0x80;
      p.gid[15] = static_cast<uint8_t>(d + 1);
    }
    o.devices.push_back(FakeVerbs::Device{"fake" + std::to_string(d), {p}});
  }
  return o;
}

VerbsOptions Opts(const VerbsApi* api) {
  VerbsOptions o;
  o.api = api;
  o.max_payload = 1024;
  o.send_slots = o.recv_slots = 32;
  o.job = kJob;
  o.heartbeat_ms = 10;
  o.peer_timeout_ms = 200;
  o.signal_every = 4;
  return o;
}

std::unique_ptr<VerbsEndpoint> Open(PeerId self, VerbsOptions o, const std::string& device = "fake0") {
  o.device = device;
  auto e = VerbsDevice(o).OpenEndpoint(self);
  EXPECT_NE(e, nullptr) << "the port is not active";
  return e;
}

void Know(VerbsEndpoint* a, VerbsEndpoint* b) {
  a->AddPeer(b->self(), b->Address());
  b->AddPeer(a->self(), a->Address());
}

// The sync message a packet holds (the tests send sync's messages: transport_test_util.hpp).
Message M(const Packet& p) { return MessageOf(p); }

Header Hdr(MsgKind kind, uint64_t seq, uint32_t bytes) {
  Header h;
  h.kind = kind;
  h.seq = seq;
  h.chunk = static_cast<uint32_t>(seq % 5);
  h.clock = seq * 3;
  h.length = bytes;
  return h;
}

// Payload bytes of message `seq` in a run seeded `seed`: fresh each run, checkable anywhere.
void Fill(std::byte* p, uint32_t n, uint32_t seed, uint64_t seq) {
  std::mt19937_64 g(seed ^ (seq * 0x9e3779b97f4a7c15ull));
  for (uint32_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>(g() & 0xff);
}
size_t BadBytes(const std::byte* p, uint32_t n, uint32_t seed, uint64_t seq) {
  std::vector<std::byte> want(n);
  Fill(want.data(), n, seed, seq);
  size_t bad = 0;
  for (uint32_t i = 0; i < n; ++i) bad += p[i] != want[i];
  return bad;
}

// Messages of random lengths (0 to max_payload, multiples of 4) in batches of 1..8, both ways;
// each arrives once with its header, its true source and every byte.
void ExchangeWhole(Transport* a, Transport* b, uint32_t seed) {
  std::mt19937 gen(seed);
  const uint32_t kMax = a->caps().max_payload - kWireHeaderBytes;  // sync's messages (transport_test_util.hpp)
  for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
    std::map<uint64_t, uint32_t> want;  // seq -> length
    uint64_t seq = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (int batch = 0; batch < 60; ++batch) {
      const int k = 1 + static_cast<int>(gen() % 8);
      for (int i = 0; i < k; ++i) {
        std::byte* slot = nullptr;
        while (!(slot = from->AcquireSend())) {
          ASSERT_LT(Clock::now(), deadline) << "no send slot came back";
          from->Flush();
        }
        ASSERT_EQ(reinterpret_cast<uintptr_t>(slot) % 16, 0u);
        const uint32_t len = (gen() % (kMax / 4 + 1)) * 4;
        ++seq;
        Fill(slot + kWireHeaderBytes, len, seed, seq);
        test::Commit(*from, slot, Dest::Peer(to->self()), Hdr(MsgKind::kPosition, seq, len));
        want[seq] = len;
      }
      from->Flush();
      Packet m[8];
      while (!want.empty()) {
        ASSERT_LT(Clock::now(), deadline) << want.size() << " messages never arrived";
        const size_t n = to->Poll(m, 8);
        for (size_t i = 0; i < n; ++i) {
          const Message got = M(m[i]);
          const Header& h = got.h;
          auto it = want.find(h.seq);
          ASSERT_NE(it, want.end()) << "seq " << h.seq << " arrived twice or was never sent";
          EXPECT_EQ(h.length, it->second);
          EXPECT_EQ(h.source, from->self());
          EXPECT_EQ(h.chunk, h.seq % 5);
          EXPECT_EQ(h.clock, h.seq * 3);
          EXPECT_EQ(reinterpret_cast<uintptr_t>(m[i].payload) % 16, 0u);
          EXPECT_EQ(BadBytes(got.payload, h.length, seed, h.seq), 0u) << "seq " << h.seq;
          want.erase(it);
        }
        to->Release(n);
        if (n == 0) from->Flush();  // heartbeats, and anything the send queue held back
      }
    }
    EXPECT_EQ(to->counters().rejected_total(), 0u);
    EXPECT_EQ(from->counters().sent, seq);
    EXPECT_EQ(to->counters().received, seq);
    EXPECT_TRUE(to->status().ok()) << to->status().what;
    EXPECT_TRUE(from->status().ok()) << from->status().what;
  }
}

// A frame of `fmt` holding the sync message h (h.length bytes of 1s), claiming h.source; of
// frame type `type`.
std::vector<std::byte> Frame(const FrameFormat& fmt, const Header& h, FrameType type = FrameType::kData) {
  std::vector<std::byte> f(kWireHeaderBytes + h.length + fmt.overhead(), std::byte{1});
  PutHeader(f.data() + FrameFormat::kHeaderBytes, h);
  fmt.Seal(f.data(), FrameHeader{type, h.source, kWireHeaderBytes + h.length});
  return f;
}

bool OneLine(const std::string& s) { return !s.empty() && s.find('\n') == std::string::npos; }

// Every test leaves the fabric clean: its endpoints (locals) are gone by TearDown, and with
// them every verbs object they made, in an order the library accepts.
class VerbsFake : public testing::Test {
 protected:
  explicit VerbsFake(FakeVerbs::Options o = Fabric()) : fake_(std::move(o)) {}
  void TearDown() override {
    EXPECT_EQ(fake_.live_objects(), 0u) << "an endpoint left verbs objects behind";
    for (const std::string& m : fake_.misuse()) ADD_FAILURE() << "verbs misuse: " << m;
  }
  FakeVerbs fake_;
};

class VerbsFakeLinks : public VerbsFake, public testing::WithParamInterface<bool> {
 protected:
  VerbsFakeLinks() : VerbsFake(Fabric(GetParam())) {}
};

TEST_P(VerbsFakeLinks, MessagesArriveWhole) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  VerbsOptions o = Opts(fake_.api());
  o.max_payload = 0;  // all the MTU allows
  o.send_slots = o.recv_slots = 16;
  auto a = Open(0, o, "fake0"), b = Open(1, o, "fake1");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->caps().max_payload, (4096 - FrameFormat(kJob).overhead()) / 16 * 16);
  EXPECT_NE(a->Address(), b->Address());
  Know(a.get(), b.get());
  ExchangeWhole(a.get(), b.get(), seed);
  EXPECT_EQ(a->unknown_sources() + b->unknown_sources(), 0u);
  const FakeVerbs::Stats s = fake_.stats();
  EXPECT_EQ(s.dropped_rnr + s.dropped_size + s.dropped_unrouted, 0u);
  EXPECT_LT(s.post_send_calls, s.sends) << "a batch should be one post_send";
}
INSTANTIATE_TEST_SUITE_P(Ports, VerbsFakeLinks, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& i) { return i.param ? "RoCE" : "InfiniBand"; });

TEST_F(VerbsFake, BadFramesAreCountedPerReasonAndDropped) {
  VerbsOptions o = Opts(fake_.api());
  o.recv_slots = 4;  // fewer buffers than bad frames: a refused frame's buffer must go back
  o.heartbeat_ms = 60000;
  auto a = Open(0, o);
  FakeVerbs::RawQp raw(fake_, o.qkey, "fake1");
  a->AddPeer(9, raw.address());  // a known peer that sends garbage
  std::vector<Header> got;
  auto inject = [&](const std::vector<std::byte>& bytes) {
    ASSERT_TRUE(raw.Send(a->Address(), bytes, o.qkey));
    Packet m[4];
    const size_t k = a->Poll(m, 4);  // the fake delivers at once
    for (size_t i = 0; i < k; ++i) got.push_back(M(m[i]).h);
    a->Release(k);
  };
  const FrameFormat ours(kJob), theirs(kJob + 1);
  Header h = Hdr(MsgKind::kDelta, 1, 64);
  inject(Frame(theirs, h));  // another job
  auto corrupt = Frame(ours, h);
  corrupt[60] ^= std::byte{4};
  inject(corrupt);
  inject(std::vector<std::byte>(10, std::byte{0}));   // short
  inject({});                                          // empty: the GRH only
  inject(std::vector<std::byte>(100, std::byte{0}));  // not ours at all
  inject(Frame(ours, Hdr(MsgKind::kDelta, 2, 2048)));  // over max_payload (1024)
  auto version = Frame(ours, h);
  version[4] = std::byte{9};
  inject(version);
  inject(Frame(ours, h, static_cast<FrameType>(42)));  // checksummed, but no frame type of ours
  Header lie = Hdr(MsgKind::kDelta, 6, 64);
  lie.source = 3;  // a lie: the fabric says it came from peer 9
  inject(Frame(ours, lie));
  Header good = Hdr(MsgKind::kDelta, 7, 64);
  good.source = 9;
  inject(Frame(ours, good));
  EXPECT_EQ(PollFor(a.get(), 1, &got, std::chrono::milliseconds(50)), 0u) << "a bad frame was delivered";
  ASSERT_EQ(got.size(), 1u) << "the good frame did not arrive (or a bad one did)";
  EXPECT_EQ(got[0].seq, 7u);
  EXPECT_EQ(got[0].source, 9);
  const TransportCounters c = a->counters();
  auto rejected = [&](Reject r) { return c.rejected[static_cast<size_t>(r)]; };
  EXPECT_EQ(rejected(Reject::kJob), 1u);
  EXPECT_EQ(rejected(Reject::kChecksum), 1u);
  EXPECT_EQ(rejected(Reject::kShort), 2u);
  EXPECT_EQ(rejected(Reject::kMagic), 1u);
  EXPECT_EQ(rejected(Reject::kLength), 1u);
  EXPECT_EQ(rejected(Reject::kVersion), 1u);
  EXPECT_EQ(rejected(Reject::kHeader), 1u);
  EXPECT_EQ(rejected(Reject::kSender), 1u) << "a frame claiming another peer than its queue pair's was taken";
  EXPECT_EQ(c.rejected_total(), 9u);
  EXPECT_EQ(c.received, 1u);
  EXPECT_EQ(fake_.stats().dropped_rnr, 0u) << "a refused frame's buffer was not posted again";
  EXPECT_TRUE(a->status().ok());
}

TEST_F(VerbsFake, KeyedEndpointsRefuseOtherKeys) {
  VerbsOptions o = Opts(fake_.api());
  JobKey k{};
  k[3] = 1;
  o.key = k;
  auto a = Open(0, o), b = Open(1, o, "fake1");
  VerbsOptions other = o;
  other.key->at(3) = 2;
  auto c = Open(2, other, "fake1");
  Know(a.get(), b.get());
  Know(a.get(), c.get());
  for (VerbsEndpoint* from : {b.get(), c.get()}) {
    const float p = 1;
    ASSERT_TRUE(test::Post(*from, Dest::Peer(0), Hdr(MsgKind::kDelta, 1, 4), &p));
    from->Flush();
  }
  EXPECT_EQ(PollFor(a.get(), 1), 1u);
  EXPECT_EQ(PollFor(a.get(), 1, nullptr, std::chrono::milliseconds(50)), 0u);
  EXPECT_EQ(a->counters().rejected[static_cast<size_t>(Reject::kMac)], 1u);
}

// A good frame of this job from a queue pair that is no peer: counted, dropped, never
// delivered under whatever source the frame names.
TEST_F(VerbsFake, UnknownSourceIsCountedAndDropped) {
  VerbsOptions o = Opts(fake_.api());
  o.recv_slots = 1;  // the stranger's frame takes a's only buffer: it must go back
  o.heartbeat_ms = 60000;
  auto a = Open(0, o), b = Open(1, o, "fake1");
  Know(a.get(), b.get());
  FakeVerbs::RawQp stranger(fake_, Opts(nullptr).qkey, "fake1");
  Header h = Hdr(MsgKind::kDelta, 5, 64);
  h.source = 1;  // claims to be b, a known peer
  ASSERT_TRUE(stranger.Send(a->Address(), Frame(FrameFormat(kJob), h), Opts(nullptr).qkey));
  EXPECT_EQ(PollFor(a.get(), 1, nullptr, std::chrono::milliseconds(100)), 0u) << "a stranger's frame was delivered";
  EXPECT_EQ(a->unknown_sources(), 1u);
  EXPECT_EQ(a->counters().rejected[static_cast<size_t>(Reject::kSender)], 1u);
  EXPECT_EQ(a->counters().rejected_total(), 1u);
  // The buffer went back: the next message from the real b still arrives.
  const float p = 2;
  ASSERT_TRUE(test::Post(*b, Dest::Peer(0), Hdr(MsgKind::kDelta, 6, 4), &p));
  b->Flush();
  std::vector<Header> got;
  EXPECT_EQ(PollFor(a.get(), 1, &got), 1u);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].seq, 6u);
  // A wrong qkey never reaches the QP at all (the HCA drops it).
  const uint64_t unrouted = fake_.stats().dropped_unrouted;
  ASSERT_TRUE(stranger.Send(a->Address(), Frame(FrameFormat(kJob), h), Opts(nullptr).qkey + 1));
  EXPECT_EQ(fake_.stats().dropped_unrouted, unrouted + 1);
}

TEST_F(VerbsFake, MulticastReachesEveryMember) {
  const uint32_t seed = TestSeed();
  VerbsGid mgid{};
  mgid[0] = 0xff;
  mgid[1] = 0x12;
  mgid[14] = static_cast<uint8_t>(seed >> 8);
  mgid[15] = static_cast<uint8_t>(seed);
  const uint16_t mlid = 0xc001;
  auto a = Open(0, Opts(fake_.api())), b = Open(1, Opts(fake_.api()), "fake1"), c = Open(2, Opts(fake_.api()));
  Know(a.get(), b.get());
  Know(a.get(), c.get());
  ASSERT_TRUE(b->AddGroup(7, mgid, mlid, true));
  ASSERT_TRUE(c->AddGroup(7, mgid, mlid, true));
  ASSERT_TRUE(a->AddGroup(7, mgid, mlid, true));  // a member too: its own sends loop back to it
  for (uint64_t s = 1; s <= 20; ++s) {
    const float p[4] = {1, 2, 3, static_cast<float>(s)};
    ASSERT_TRUE(test::Post(*a, Dest::Group(7), Hdr(MsgKind::kPosition, s, 16), p));
    if (s % 5 == 0) a->Flush();
  }
  std::vector<Header> at_b, at_c;
  EXPECT_EQ(PollFor(b.get(), 20, &at_b), 20u);
  EXPECT_EQ(PollFor(c.get(), 20, &at_c), 20u);
  for (const auto* got : {&at_b, &at_c}) {
    for (size_t i = 0; i < got->size(); ++i) {
      EXPECT_EQ((*got)[i].seq, i + 1);
      EXPECT_EQ((*got)[i].source, 0);
    }
  }
  EXPECT_EQ(PollFor(a.get(), 1, nullptr, std::chrono::milliseconds(50)), 0u) << "the sender got its own echo";
  EXPECT_EQ(a->unknown_sources(), 0u) << "its own echo is not a stranger";
  EXPECT_GE(fake_.stats().delivered, 60u);  // b, c and the loopback to a
  // A group GID that is not multicast is a one-line Error; an unknown group is one too.
  VerbsGid unicast{};
  unicast[0] = 0xfe;
  EXPECT_THROW(a->AddGroup(8, unicast, 1, true), Error);
  const float p = 0;
  EXPECT_THROW(test::Post(*a, Dest::Group(9), Hdr(MsgKind::kPosition, 1, 4), &p), Error);
}

// A held message stays valid: its buffer is not posted again until Release. With every buffer
// held the sender's frames find none and are dropped (UD: RNR is silent); after Release they
// flow again.
TEST_F(VerbsFake, ReceiveBuffersComeBackOnlyAtRelease) {
  const uint32_t seed = TestSeed();
  VerbsOptions o = Opts(fake_.api());
  o.recv_slots = 4;
  o.heartbeat_ms = 60000;  // no heartbeats: they would take buffers too
  auto a = Open(0, o), b = Open(1, o, "fake1");
  Know(a.get(), b.get());
  auto send = [&](uint64_t first, uint64_t count) {
    for (uint64_t s = first; s < first + count; ++s) {
      std::byte* slot = a->AcquireSend();
      ASSERT_NE(slot, nullptr);
      Fill(slot + kWireHeaderBytes, 256, seed, s);
      test::Commit(*a, slot, Dest::Peer(1), Hdr(MsgKind::kDelta, s, 256));
    }
    a->Flush();
  };
  send(1, 4);
  Packet held[4];
  size_t n = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (n < 4 && Clock::now() < deadline) n += b->Poll(held + n, 4 - n);
  ASSERT_EQ(n, 4u);
  const uint64_t rnr = fake_.stats().dropped_rnr;
  send(5, 3);  // nowhere to go
  EXPECT_EQ(fake_.stats().dropped_rnr, rnr + 3) << "a held buffer was posted again before Release";
  Packet m[4];
  EXPECT_EQ(b->Poll(m, 4), 0u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(M(held[i]).h.seq, i + 1);
    EXPECT_EQ(BadBytes(M(held[i]).payload, 256, seed, i + 1), 0u) << "held message " << i + 1 << " was overwritten";
  }
  b->Release(2);
  send(8, 2);
  std::vector<Header> got;
  EXPECT_EQ(PollFor(b.get(), 2, &got), 2u);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].seq, 8u);
  EXPECT_EQ(got[1].seq, 9u);
  for (size_t i = 2; i < 4; ++i)  // the two still held are intact
    EXPECT_EQ(BadBytes(M(held[i]).payload, 256, seed, i + 1), 0u) << "held message " << i + 1 << " was overwritten";
  b->Release(2);
}

// One signalled send per signal_every, and its completion frees every slot before it: more
// messages than slots go through, with about a quarter of the sends signalled.
TEST_F(VerbsFake, SelectiveSignallingFreesSlots) {
  VerbsOptions o = Opts(fake_.api());
  o.send_slots = 8;
  o.signal_every = 4;
  o.recv_slots = 64;
  o.heartbeat_ms = 60000;
  auto a = Open(0, o), b = Open(1, o, "fake1");
  Know(a.get(), b.get());
  const uint64_t kCount = 200;
  uint64_t sent = 0, received = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  Packet m[8];
  while (received < kCount) {
    ASSERT_LT(Clock::now(), deadline) << "stuck at " << sent << " sent, " << received
                                      << " received: send slots never came back";
    const float p = 1;
    while (sent < kCount && test::Post(*a, Dest::Peer(1), Hdr(MsgKind::kDelta, sent + 1, 4), &p)) ++sent;
    a->Flush();
    for (size_t k; (k = b->Poll(m, 8)) > 0;) {
      b->Release(k);
      received += k;
    }
  }
  EXPECT_EQ(received, kCount);
  const FakeVerbs::Stats s = fake_.stats();
  EXPECT_EQ(s.sends, kCount);
  EXPECT_GE(s.signaled, kCount / 4 - 1);
  EXPECT_LE(s.signaled, kCount / 4 + kCount / 8) << "selective signalling signalled too many sends";
  EXPECT_GT(a->counters().send_full, 0u) << "the test should have run the slots out";
}

// The sender's queue refusing a post (ENOMEM) is "later"; any other failed post latches.
TEST_F(VerbsFake, FailedPostsRetryOrLatch) {
  VerbsOptions o = Opts(fake_.api());
  o.heartbeat_ms = 60000;
  auto a = Open(0, o), b = Open(1, o, "fake1");
  Know(a.get(), b.get());
  const float p = 1;
  ASSERT_TRUE(test::Post(*a, Dest::Peer(1), Hdr(MsgKind::kDelta, 1, 4), &p));
  fake_.FailNextPostSend(ENOMEM);
  a->Flush();  // refused: stays queued
  EXPECT_EQ(PollFor(b.get(), 1, nullptr, std::chrono::milliseconds(20)), 0u);
  a->Flush();
  EXPECT_EQ(PollFor(b.get(), 1), 1u);
  EXPECT_TRUE(a->status().ok());
  ASSERT_TRUE(test::Post(*a, Dest::Peer(1), Hdr(MsgKind::kDelta, 2, 4), &p));
  fake_.FailNextPostSend(EINVAL);
  a->Flush();
  EXPECT_EQ(a->status().code, Status::kIoError);
  EXPECT_TRUE(OneLine(a->status().what)) << a->status().what;
  EXPECT_NE(a->status().what.find("post_send"), std::string::npos) << a->status().what;
  EXPECT_NE(a->AcquireSend(), nullptr) << "the dropped frame's slot was not given back";
}

TEST_F(VerbsFake, SendErrorCompletionLatchesIoError) {
  auto a = Open(0, Opts(fake_.api())), b = Open(1, Opts(fake_.api()), "fake1");
  Know(a.get(), b.get());
  fake_.ErrorNextSend(IBV_WC_LOC_QP_OP_ERR);
  const float p = 1;
  ASSERT_TRUE(test::Post(*a, Dest::Peer(1), Hdr(MsgKind::kDelta, 1, 4), &p));  // unsignalled: errors complete anyway
  a->Flush();
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (a->status().ok() && Clock::now() < deadline) a->Flush();
  const Status s = a->status();
  EXPECT_EQ(s.code, Status::kIoError);
  EXPECT_TRUE(OneLine(s.what)) << s.what;
  EXPECT_NE(s.what.find("local QP operation error"), std::string::npos) << s.what;
}

TEST_F(VerbsFake, ReceiveErrorCompletionLatchesIoError) {
  auto a = Open(0, Opts(fake_.api())), b = Open(1, Opts(fake_.api()), "fake1");
  Know(a.get(), b.get());
  fake_.ErrorNextReceive(IBV_WC_LOC_PROT_ERR);
  const float p = 1;
  ASSERT_TRUE(test::Post(*a, Dest::Peer(1), Hdr(MsgKind::kDelta, 1, 4), &p));
  a->Flush();
  Packet m;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (b->status().ok() && Clock::now() < deadline) EXPECT_EQ(b->Poll(&m, 1), 0u);
  const Status s = b->status();
  EXPECT_EQ(s.code, Status::kIoError);
  EXPECT_TRUE(OneLine(s.what)) << s.what;
  EXPECT_NE(s.what.find("local protection error"), std::string::npos) << s.what;
}

bool Readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

// wait_fd() wakes a poll() when a message arrives; it stays readable while a Poll that stopped
// at `max` may have left messages behind, and goes quiet once Poll found nothing.
TEST_F(VerbsFake, WaitFdWakesPoll) {
  VerbsOptions o = Opts(fake_.api());
  o.heartbeat_ms = 60000;
  auto a = Open(0, o), b = Open(1, o, "fake1");
  Know(a.get(), b.get());
  ASSERT_GE(b->wait_fd(), 0);
  Packet m[4];
  EXPECT_EQ(b->Poll(m, 4), 0u);
  EXPECT_FALSE(Readable(b->wait_fd(), 0)) << "readable with nothing waiting";
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    const float p = 1;
    test::Post(*a, Dest::Peer(1), Hdr(MsgKind::kDelta, 1, 4), &p);
    a->Flush();
  });
  const auto t0 = Clock::now();
  const bool woke = Readable(b->wait_fd(), 5000);
  sender.join();
  ASSERT_TRUE(woke) << "no wake-up within 5 s";
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(4));
  EXPECT_EQ(b->Poll(m, 4), 1u);
  b->Release(1);
  EXPECT_EQ(b->Poll(m, 4), 0u);
  EXPECT_FALSE(Readable(b->wait_fd(), 0)) << "still readable after Poll drained everything";
  // Three waiting, taken one at a time: readable before each.
  for (uint64_t s = 2; s <= 4; ++s) {
    const float p = 1;
    ASSERT_TRUE(test::Post(*a, Dest::Peer(1), Hdr(MsgKind::kDelta, s, 4), &p));
  }
  a->Flush();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Readable(b->wait_fd(), 1000)) << "not readable with " << 3 - i << " messages waiting";
    ASSERT_EQ(b->Poll(m, 1), 1u);
    b->Release(1);
  }
  EXPECT_EQ(b->Poll(m, 4), 0u);
  EXPECT_FALSE(Readable(b->wait_fd(), 0));
}

// Two threads, each the sender and receiver of one end, both ways at once (the threading of
// transport.hpp). UD may drop (no buffer posted: RNR), so the check is a ledger: every message
// sent was either received whole or dropped for want of a buffer, nothing else.
TEST_F(VerbsFake, BothEndsOnTheirOwnThreads) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  VerbsOptions o = Opts(fake_.api());
  o.heartbeat_ms = 60000;  // only messages on the wire: the ledger counts them
  // No heartbeats, so no silence limit either: an end that has sent all it had is silent while
  // the other, descheduled on a loaded host, still sends (CI's sanitizer run saw "peer 0 silent
  // for 200 ms"). Liveness has its own test below.
  o.peer_timeout_ms = 60000;
  o.send_slots = 16;
  o.recv_slots = 16;
  auto a = Open(0, o), b = Open(1, o, "fake1");
  Know(a.get(), b.get());
  const uint64_t kCount = 3000;
  std::atomic<size_t> bad{0};
  std::atomic<int> done{0};
  auto run = [&](VerbsEndpoint* me, PeerId to, uint64_t* received) {
    std::mt19937 gen(seed + me->self());
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    uint64_t sent = 0;
    Packet m[8];
    // Keep receiving until the other end has sent everything, so its last frames are seen.
    while ((sent < kCount || done.load() < 2) && Clock::now() < deadline) {
      if (sent < kCount) {
        if (std::byte* slot = me->AcquireSend()) {
          const uint32_t len = (gen() % 65) * 4;
          ++sent;
          const uint64_t seq = sent * 2 + me->self();
          Fill(slot + kWireHeaderBytes, len, seed, seq);
          test::Commit(*me, slot, Dest::Peer(to), Hdr(MsgKind::kDelta, seq, len));
        }
        me->Flush();
        if (sent == kCount) done.fetch_add(1);
      }
      const size_t k = me->Poll(m, 8);
      for (size_t i = 0; i < k; ++i)
        if (m[i].source != to || BadBytes(M(m[i]).payload, M(m[i]).h.length, seed, M(m[i]).h.seq) != 0) ++bad;
      me->Release(k);
      *received += k;
    }
  };
  uint64_t at_a = 0, at_b = 0;
  std::thread tb([&] { run(b.get(), 0, &at_b); });
  run(a.get(), 1, &at_a);
  tb.join();
  // Whatever is still in a completion queue is taken now.
  for (VerbsEndpoint* e : {a.get(), b.get()}) PollFor(e, 2 * kCount, nullptr, std::chrono::milliseconds(50));
  ASSERT_EQ(done.load(), 2) << "a sender did not finish within 20 s";
  EXPECT_EQ(bad.load(), 0u);
  const FakeVerbs::Stats s = fake_.stats();
  EXPECT_EQ(s.sends, 2 * kCount);
  EXPECT_EQ(a->counters().received + b->counters().received + s.dropped_rnr, 2 * kCount);
  EXPECT_GT(a->counters().received, 0u);
  EXPECT_GT(b->counters().received, 0u);
  EXPECT_TRUE(a->status().ok()) << a->status().what;
  EXPECT_TRUE(b->status().ok()) << b->status().what;
}

// Heartbeats keep idle peers up; a peer that goes away is "peer down" within a deadline.
TEST_F(VerbsFake, ClosedPeerBecomesPeerDown) {
  auto a = Open(0, Opts(fake_.api())), b = Open(1, Opts(fake_.api()), "fake1");
  Know(a.get(), b.get());
  const float p = 1;
  ASSERT_TRUE(test::Post(*b, Dest::Peer(0), Hdr(MsgKind::kIteration, 1, 4), &p));
  b->Flush();
  ASSERT_EQ(PollFor(a.get(), 1), 1u);
  // Idle for three timeouts, both ends calling Flush and Poll: heartbeats keep them up.
  Packet m;
  for (const auto idle = Clock::now() + std::chrono::milliseconds(600); Clock::now() < idle;) {
    for (VerbsEndpoint* e : {a.get(), b.get()}) {
      e->Flush();
      EXPECT_EQ(e->Poll(&m, 1), 0u);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(a->status().ok()) << a->status().what;
  ASSERT_TRUE(b->status().ok()) << b->status().what;
  b.reset();
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (a->status().ok()) {
    ASSERT_LT(Clock::now(), deadline) << "no peer-down within 5 s";
    a->Flush();
    a->Poll(&m, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(a->status().code, Status::kPeerDown);
  EXPECT_EQ(a->status().peer, 1);
  EXPECT_TRUE(OneLine(a->status().what)) << a->status().what;
}

TEST_F(VerbsFake, RegisterGivesHostAndPinnedMemoryAnMr) {
  auto a = Open(0, Opts(fake_.api()));
  EXPECT_EQ(a->caps().memory, static_cast<uint8_t>(MemoryKind::kHost) | static_cast<uint8_t>(MemoryKind::kPinned));
  std::vector<float> w(1000);
  const size_t before = fake_.live_objects();
  a->Register(w.data(), w.size() * sizeof(float), MemoryKind::kHost);
  EXPECT_EQ(fake_.live_objects(), before + 1);
  EXPECT_THROW(a->Register(w.data(), 4, MemoryKind::kPinned), Error) << "registered twice";
  try {
    a->Register(w.data() + 10, 4, MemoryKind::kDevice);
    ADD_FAILURE() << "device memory accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(OneLine(e.what()));
    EXPECT_NE(std::string(e.what()).find("GPUDirect"), std::string::npos) << e.what();
  }
  a->Deregister(w.data());
  EXPECT_EQ(fake_.live_objects(), before);
  a->Register(w.data() + 500, 16, MemoryKind::kPinned);  // left for the destructor
}

TEST(VerbsSetup, OpenWithNoDeviceIsOneLineError) {
  FakeVerbs none(FakeVerbs::NoDevice());
  const std::string e = ErrorOf([&] { VerbsDevice(Opts(none.api())).Open(0); });
  EXPECT_TRUE(OneLine(e)) << "'" << e << "'";
  EXPECT_NE(e.find("no RDMA device"), std::string::npos) << e;
  EXPECT_NE(e.find("--transport=udp"), std::string::npos) << e;
  EXPECT_TRUE(none.misuse().empty());
}

TEST(VerbsSetup, NoLibraryIsOneLineError) {
  VerbsApi missing;
  missing.unavailable = "cannot load libibverbs.so.1 (libibverbs.so.1: cannot open shared object file)";
  const std::string e = ErrorOf([&] { VerbsDevice(Opts(&missing)).Open(0); });
  EXPECT_TRUE(OneLine(e)) << "'" << e << "'";
  EXPECT_NE(e.find("libibverbs.so.1"), std::string::npos) << e;
  EXPECT_NE(e.find("--transport=udp"), std::string::npos) << e;
}

TEST(VerbsSetup, BadSettingsAreOneLineErrors) {
  FakeVerbs fake(Fabric());
  auto open = [&](VerbsOptions o) { return ErrorOf([&] { VerbsDevice(o).Open(0); }); };
  VerbsOptions o = Opts(fake.api());
  o.max_payload = 4096;
  std::string e = open(o);
  EXPECT_TRUE(OneLine(e)) << e;
  EXPECT_NE(e.find("MTU is 4096"), std::string::npos) << e;
  o = Opts(fake.api());
  o.device = "mlx5_9";
  e = open(o);
  EXPECT_TRUE(OneLine(e)) << e;
  EXPECT_NE(e.find("fake0, fake1"), std::string::npos) << "should list what exists: " << e;
  o = Opts(fake.api());
  o.port = 2;
  EXPECT_TRUE(OneLine(open(o))) << open(o);
  o = Opts(fake.api());
  o.signal_every = 33;
  EXPECT_TRUE(OneLine(open(o))) << open(o);
  o = Opts(fake.api());
  o.qkey = 0x80000001u;
  EXPECT_TRUE(OneLine(open(o))) << open(o);
  o = Opts(fake.api());
  o.max_payload = 100;
  EXPECT_TRUE(OneLine(open(o))) << open(o);
  EXPECT_EQ(fake.live_objects(), 0u) << "a refused Open left verbs objects behind";
  EXPECT_TRUE(fake.misuse().empty());
}

TEST(VerbsSetup, PortComingUpIsNotYetAndPortDownIsAnError) {
  FakeVerbs::Options fo = Fabric();
  fo.devices[0].ports[0].state = IBV_PORT_INIT;
  fo.devices[1].ports[0].state = IBV_PORT_DOWN;
  FakeVerbs fake(fo);
  VerbsOptions o = Opts(fake.api());
  o.device = "fake0";
  EXPECT_EQ(VerbsDevice(o).Open(0), nullptr);
  o.device = "fake1";
  const std::string e = ErrorOf([&] { VerbsDevice(o).Open(0); });
  EXPECT_TRUE(OneLine(e)) << e;
  EXPECT_NE(e.find("DOWN"), std::string::npos) << e;
  EXPECT_EQ(fake.live_objects(), 0u);
}

// ---------------------------------------------------------------- the real library

// True when VerbsApi::System() lists at least one device; else says why in *why.
bool HaveHardware(std::string* why) {
  const VerbsApi* api = VerbsApi::System();
  if (api->unavailable) {
    *why = api->unavailable;
    return false;
  }
  int n = 0;
  errno = 0;
  ibv_device** list = api->device_list(&n);
  const int err = errno;
  if (list) api->free_device_list(list);
  if (!list || n <= 0) {
    *why = "ibv_get_device_list lists no RDMA device (" + (list ? std::string("none") : ErrnoText(err)) + ")";
    return false;
  }
  return true;
}

// Without a device, the real library's answer is the same one line (this runs here).
TEST(VerbsOnHardware, OpenWithoutDeviceIsOneLineError) {
  std::string why;
  if (HaveHardware(&why)) GTEST_SKIP() << "this host has an RDMA device";
  const std::string e = ErrorOf([] { VerbsDevice(VerbsOptions{}).Open(0); });
  EXPECT_TRUE(OneLine(e)) << "'" << e << "'";
  EXPECT_NE(e.find("--transport=udp"), std::string::npos) << e;
}

TEST(VerbsOnHardware, MessagesArriveWhole) {
  std::string why;
  if (!HaveHardware(&why)) GTEST_SKIP() << "no RDMA hardware: " << why << "; the same test runs over the fake";
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  VerbsOptions o;
  o.job = kJob;
  o.send_slots = o.recv_slots = 16;
  o.heartbeat_ms = 10;
  o.peer_timeout_ms = 1000;
  auto [a, b] = VerbsDevice(o).LoopbackPair();
  ExchangeWhole(a.get(), b.get(), seed);
}

}  // namespace
}  // namespace hogstream

#endif  // HOGSTREAM_VERBS
