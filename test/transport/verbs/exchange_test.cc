// The verbs address exchange (transport/verbs/exchange.hpp) over real UDP sockets on loopback:
// every rank learns every other rank's address although the bootstrap drops, duplicates and
// reorders messages; a rank that never comes, or that sends a malformed address, is named in
// one line within the timeout.
#ifdef HOGSTREAM_VERBS

#include "transport/verbs/exchange.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test/error_of.hpp"
#include "test/test_seed.hpp"
#include "transport/fault/endpoint.hpp"
#include "transport/udp/endpoint.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using namespace std::chrono_literals;

// Ranks 0..n-1 as UDP endpoints on loopback, each knowing the others' ports.
std::vector<std::unique_ptr<UdpEndpoint>> Bootstraps(int n) {
  std::vector<std::unique_ptr<UdpEndpoint>> eps;
  for (int r = 0; r < n; ++r) {
    UdpOptions o;
    o.job = 0x5e7b;
    o.peer_timeout_ms = 1u << 30;
    o.max_payload = 256;
    eps.push_back(std::make_unique<UdpEndpoint>(static_cast<PeerId>(r), o));
  }
  for (int r = 0; r < n; ++r)
    for (int q = 0; q < n; ++q)
      if (q != r) eps[r]->AddPeer(static_cast<PeerId>(q), "127.0.0.1", eps[q]->port());
  return eps;
}

VerbsAddress RandomAddress(std::mt19937& rng) {
  VerbsAddress a;
  a.lid = static_cast<uint16_t>(rng());
  for (auto& b : a.gid) b = static_cast<uint8_t>(rng());
  a.qpn = rng() & 0xffffff;
  return a;
}

TEST(VerbsExchange, EveryRankLearnsEveryAddressDespiteLoss) {
  constexpr int kRanks = 4;
  std::mt19937 rng(TestSeed());
  auto udp = Bootstraps(kRanks);
  std::vector<std::unique_ptr<Transport>> lossy;
  std::vector<VerbsAddress> mine;
  for (int r = 0; r < kRanks; ++r) {
    FaultOptions f;
    f.drop = 0.2;
    f.duplicate = 0.1;
    f.reorder = 0.1;
    f.seed = rng();
    lossy.push_back(std::make_unique<FaultEndpoint>(std::move(udp[r]), f));
    mine.push_back(RandomAddress(rng));
  }
  std::vector<std::vector<VerbsAddress>> got(kRanks);
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> ts;
  for (int r = 0; r < kRanks; ++r)
    ts.emplace_back([&, r] {
      VerbsExchangeOptions o;
      o.timeout = 10s;
      try {
        got[r] = ExchangeVerbsAddresses(*lossy[r], kRanks, mine[r], o);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  uint64_t dropped = 0;
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    ASSERT_EQ(got[r].size(), size_t{kRanks});
    for (int q = 0; q < kRanks; ++q) EXPECT_EQ(got[r][q], mine[q]) << "rank " << r << " about rank " << q;
    dropped += lossy[r]->counters().dropped;
  }
  EXPECT_GT(dropped, 0u) << "the bootstrap lost nothing: the test proved less than it says";
}

TEST(VerbsExchange, ARankThatNeverComesIsNamed) {
  auto udp = Bootstraps(3);
  std::mt19937 rng(TestSeed());
  VerbsExchangeOptions o;
  o.timeout = 300ms;
  o.name = [](PeerId r) { return "'verbs://host" + std::to_string(r) + ":7000'"; };
  std::string other_error;
  std::thread one([&] {  // rank 1 comes, rank 2 never does
    try {
      ExchangeVerbsAddresses(*udp[1], 3, RandomAddress(rng), o);
    } catch (const std::exception& e) {
      other_error = e.what();
    }
  });
  const auto start = std::chrono::steady_clock::now();
  const std::string e = ErrorOf([&] { ExchangeVerbsAddresses(*udp[0], 3, VerbsAddress{}, o); });
  one.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_NE(e.find("no answer within 0.3 s from 'verbs://host2:7000'"), std::string::npos) << e;
  EXPECT_EQ(e.find("host1"), std::string::npos) << "rank 1 answered: " << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_NE(other_error.find("'verbs://host2:7000'"), std::string::npos) << other_error;
}

// A bootstrap whose every Poll takes a few milliseconds (a loaded host, a rank descheduled):
// the next HELLO falls due while the rank is busy, and the wait computed from it is past.
class SlowPoll : public Transport {
 public:
  explicit SlowPoll(std::unique_ptr<Transport> t) : t_(std::move(t)) {}
  PeerId self() const override { return t_->self(); }
  Caps caps() const override { return t_->caps(); }
  std::byte* AcquireSend() override { return t_->AcquireSend(); }
  void CommitSend(Dest to, uint32_t length) override { t_->CommitSend(to, length); }
  void Flush() override { t_->Flush(); }
  size_t Poll(Packet* out, size_t max) override {
    std::this_thread::sleep_for(5ms);
    return t_->Poll(out, max);
  }
  void Release(size_t n) override { t_->Release(n); }
  int wait_fd() const override { return t_->wait_fd(); }

 private:
  std::unique_ptr<Transport> t_;
};

// Rank 1 comes, rank 2 never does, and rank 0's bootstrap is slow (HELLOs due every 1 ms): its
// exchange still ends in one line within its timeout. (It used to wait in poll(2) with a
// negative timeout, that is forever, once rank 1 had given up and gone quiet.)
TEST(VerbsExchange, ASlowRankStillEndsWithinItsTimeout) {
  auto udp = Bootstraps(3);
  const uint16_t port0 = udp[0]->port();
  SlowPoll slow(std::move(udp[0]));
  std::mt19937 rng(TestSeed());
  VerbsExchangeOptions o;
  o.timeout = 300ms;
  o.resend = 1ms;
  std::thread one([&] {
    try {
      ExchangeVerbsAddresses(*udp[1], 3, RandomAddress(rng), o);
    } catch (const std::exception&) {  // (rank 2 never came: expected)
    }
  });
  auto ended = std::async(std::launch::async, [&] { return ErrorOf([&] { ExchangeVerbsAddresses(slow, 3, VerbsAddress{}, o); }); });
  const bool in_time = ended.wait_for(5s) == std::future_status::ready;
  EXPECT_TRUE(in_time) << "rank 0 still waits 5 s into an exchange with a timeout of 0.3 s";
  one.join();
  while (ended.wait_for(10ms) != std::future_status::ready) {  // wake a rank stuck in poll(2), to end the test
    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port0);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void)!sendto(fd, "x", 1, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
    close(fd);
  }
  EXPECT_NE(ended.get().find("no answer within 0.3 s"), std::string::npos);
}

TEST(VerbsExchange, AMalformedAddressIsOneLine) {
  auto udp = Bootstraps(2);
  const char junk[8] = {'H', 'S', 'V', 'X', 1, 2, 3, 4};  // the exchange's tag, then no address
  ASSERT_TRUE(udp[1]->PostSend(Dest::Peer(0), junk, sizeof junk));
  udp[1]->Flush();
  VerbsExchangeOptions o;
  o.timeout = 2s;
  const std::string e = ErrorOf([&] { ExchangeVerbsAddresses(*udp[0], 2, VerbsAddress{}, o); });
  EXPECT_NE(e.find("rank 1 sent a malformed address (8 bytes)"), std::string::npos) << e;
}

}  // namespace
}  // namespace hogstream

#endif  // HOGSTREAM_VERBS
