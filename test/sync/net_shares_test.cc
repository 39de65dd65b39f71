// The chunk shares of a job across machines (sync/net_shares.hpp): every streamed chunk has
// exactly one owner among the ready machines, a re-share after a death or a return moves the
// owners and gives every new master a new epoch, a newcomer gets a master before it owns
// anything, multicast keeps its one master, and --svb's skipped chunks have no owner.
#include "sync/net_shares.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "test/test_seed.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

constexpr uint32_t kChunks = 79;
constexpr uint32_t kFirstEpoch = 1700000000;

// Every chunk has exactly one owner, one of `ready` (or none where skipped), the shares differ
// by one at most, and owned() lists exactly `self`'s.
void ExpectOneOwnerEach(const NetShares& s, const std::vector<PeerId>& ready, int self) {
  ASSERT_EQ(s.owners().size(), s.chunks());
  std::vector<uint32_t> per(65536, 0);
  std::vector<uint32_t> mine;
  for (uint32_t c = 0; c < s.chunks(); ++c) {
    const PeerId o = s.owners()[c];
    if (s.skipped(c)) {
      EXPECT_EQ(o, kNoPeer) << "skipped chunk " << c;
      EXPECT_FALSE(s.Theirs(c));
      continue;
    }
    ASSERT_NE(std::find(ready.begin(), ready.end(), o), ready.end()) << "chunk " << c << " owned by " << o;
    ++per[o];
    if (o == self) mine.push_back(c);
    EXPECT_EQ(s.Theirs(c), o != self);
  }
  EXPECT_EQ(s.owned(), mine);
  uint32_t lo = kChunks, hi = 0;
  for (PeerId r : ready) lo = std::min(lo, per[r]), hi = std::max(hi, per[r]);
  EXPECT_LE(hi - lo, 1u) << "uneven shares";
}

std::vector<PeerId> Ranks(const NetShares::Change& ch) {
  std::vector<PeerId> to;
  for (const NetShares::Master& m : ch.make) to.push_back(m.to.id);
  return to;
}

TEST(NetSharesTest, AReshareAfterADeathGivesEveryChunkOneLiveOwnerAndNewEpochs) {
  NetShares s(0, 3, false, kFirstEpoch);
  s.set_chunks(kChunks);
  NetShares::Change ch = s.Reshare({0, 1, 2}, {true, true, true});
  EXPECT_TRUE(ch.owners);
  EXPECT_TRUE(ch.masters);
  EXPECT_EQ(s.reshares(), 0u) << "the first share is no re-share";
  ExpectOneOwnerEach(s, {0, 1, 2}, 0);
  EXPECT_EQ(Ranks(ch), (std::vector<PeerId>{1, 2}));
  EXPECT_EQ(ch.make[0].epoch, kFirstEpoch + 1);
  EXPECT_EQ(ch.make[1].epoch, kFirstEpoch + 2);
  EXPECT_FALSE(s.Reshare({0, 1, 2}, {true, true, true}).masters) << "nothing changed";
  // Machine 1 dies.
  ch = s.Reshare({0, 2}, {true, false, true});
  EXPECT_TRUE(ch.owners);
  EXPECT_TRUE(ch.masters);
  EXPECT_EQ(s.reshares(), 1u);
  ExpectOneOwnerEach(s, {0, 2}, 0);
  EXPECT_EQ(Ranks(ch), std::vector<PeerId>{2});
  EXPECT_EQ(ch.make[0].epoch, kFirstEpoch + 3) << "a new master: a new epoch, above every earlier one";
  EXPECT_EQ(s.epoch(), kFirstEpoch + 3);
  EXPECT_EQ(s.first_epoch(), kFirstEpoch);
  // It is back and ready.
  ch = s.Reshare({0, 1, 2}, {true, true, true});
  EXPECT_EQ(s.reshares(), 2u);
  ExpectOneOwnerEach(s, {0, 1, 2}, 0);
  EXPECT_EQ(Ranks(ch), (std::vector<PeerId>{1, 2}));
  EXPECT_GT(ch.make[0].epoch, kFirstEpoch + 3);
}

// A machine live but without the weights owns nothing, but this machine's masters reach it
// (it receives positions before it owns anything): they are made anew, the owners unchanged.
TEST(NetSharesTest, ANewcomerGetsAMasterBeforeItOwnsAnything) {
  NetShares s(1, 3, false, kFirstEpoch);
  s.set_chunks(kChunks);
  s.Reshare({0, 1}, {true, true, false});
  const std::vector<PeerId> owners = s.owners();
  const NetShares::Change ch = s.Reshare({0, 1}, {true, true, true});
  EXPECT_FALSE(ch.owners);
  EXPECT_TRUE(ch.masters);
  EXPECT_EQ(Ranks(ch), (std::vector<PeerId>{0, 2}));
  EXPECT_EQ(s.owners(), owners);
  EXPECT_EQ(s.reshares(), 0u);
  EXPECT_EQ(ch.receivers, 2u);
  EXPECT_FALSE(s.Reshare({0, 1}, {true, true, true}).masters);
}

// A machine that gives up its chunks (a recovery: not ready) masters nothing: no masters.
TEST(NetSharesTest, AMachineThatOwnsNothingHasNoMasters) {
  NetShares s(0, 2, false, kFirstEpoch);
  s.set_chunks(kChunks);
  s.Reshare({0, 1}, {true, true});
  const NetShares::Change ch = s.Reshare({1}, {true, true});
  EXPECT_TRUE(ch.owners);
  EXPECT_TRUE(ch.masters);
  EXPECT_TRUE(ch.make.empty());
  EXPECT_TRUE(s.owned().empty());
  EXPECT_FALSE(s.Reshare({1}, {true, true}).masters);
  EXPECT_FALSE(s.Reshare({}, {true, false}).masters) << "nobody ready: nothing changes";
  EXPECT_EQ(s.owners(), std::vector<PeerId>(kChunks, 1));
}

// Multicast: one master to the group; a machine's death that moves no chunk changes only the
// count of receivers.
TEST(NetSharesTest, MulticastHasOneMasterWhoseReceiversFollowTheLiveMachines) {
  NetShares s(0, 3, true, kFirstEpoch);
  s.set_chunks(kChunks);
  NetShares::Change ch = s.Reshare({0, 1}, {true, true, true});
  ASSERT_EQ(ch.make.size(), 1u);
  EXPECT_TRUE(ch.make[0].to.group);
  EXPECT_EQ(ch.receivers, 2u);
  ch = s.Reshare({0, 1}, {true, true, false});
  EXPECT_FALSE(ch.masters);
  EXPECT_EQ(ch.receivers, 1u);
}

TEST(NetSharesTest, ChunksSvbSkipsHaveNoOwnerAndTheRestAreShared) {
  std::vector<bool> skipped(kChunks, false);
  for (uint32_t c = 10; c < 40; ++c) skipped[c] = true;
  NetShares s(2, 3, false, kFirstEpoch);
  s.set_chunks(kChunks, skipped);
  s.Reshare({0, 1, 2}, {true, true, true});
  ExpectOneOwnerEach(s, {0, 1, 2}, 2);
  for (uint32_t c = 10; c < 40; ++c) EXPECT_EQ(s.owners()[c], kNoPeer);
  EXPECT_EQ(ShareStreamed({}, 5, {3, 4}), (std::vector<PeerId>{3, 3, 3, 4, 4}));
}

// Share weights (by rank): the ready machines' runs are in proportion to theirs; a machine
// beyond the list weighs 1; when one leaves, the rest share by their own weights.
TEST(NetSharesTest, SharesFollowTheMachinesWeights) {
  NetShares s(0, 4, true, kFirstEpoch);
  s.set_chunks(26);
  s.set_weights({1, 1, 0.25});  // machine 3: 1
  s.Reshare({0, 1, 2, 3}, {true, true, true, true});
  auto count = [&](PeerId r) { return std::count(s.owners().begin(), s.owners().end(), r); };
  EXPECT_EQ(count(0), 8);  // quotas 8, 8, 2, 8
  EXPECT_EQ(count(1), 8);
  EXPECT_EQ(count(2), 2);
  EXPECT_EQ(count(3), 8);
  EXPECT_EQ(s.owned().size(), 8u);
  s.Reshare({0, 2, 3}, {true, false, true, true});
  EXPECT_EQ(count(0), 12);  // quotas 11.56, 2.89, 11.56
  EXPECT_EQ(count(2), 3);
  EXPECT_EQ(count(3), 11);
}

// Random deaths and returns: after each re-share every streamed chunk has one owner among the
// ready machines, and every master made has an epoch above every one made before.
TEST(NetSharesTest, RandomResharesKeepOneReadyOwnerPerChunkAndEpochsGrow) {
  std::mt19937 rng(TestSeed());
  const int machines = 5, self = 2;
  std::vector<bool> skipped(kChunks);
  for (uint32_t c = 0; c < kChunks; ++c) skipped[c] = rng() % 5 == 0;
  NetShares s(self, machines, false, kFirstEpoch);
  s.set_chunks(kChunks, skipped);
  uint32_t last_epoch = kFirstEpoch;
  uint64_t reshares = 0;
  std::vector<PeerId> before;
  for (int step = 0; step < 300; ++step) {
    std::vector<bool> live(machines);
    std::vector<PeerId> ready;
    for (int r = 0; r < machines; ++r) {
      live[r] = r == self || rng() % 4 != 0;
      if (live[r] && rng() % 3 != 0) ready.push_back(static_cast<PeerId>(r));
    }
    const NetShares::Change ch = s.Reshare(ready, live);
    if (ready.empty()) continue;
    ExpectOneOwnerEach(s, ready, self);
    EXPECT_EQ(ch.owners, s.owners() != before);
    reshares += ch.owners && !before.empty();
    before = s.owners();
    for (const NetShares::Master& m : ch.make) {
      EXPECT_GT(m.epoch, last_epoch);
      last_epoch = m.epoch;
      EXPECT_TRUE(live[m.to.id]);
      EXPECT_NE(m.to.id, self);
    }
  }
  EXPECT_EQ(s.reshares(), reshares);
}

}  // namespace
}  // namespace hogstream
