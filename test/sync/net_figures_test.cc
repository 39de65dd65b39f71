// The figures of a machine of a job (sync/net_figures.hpp): stragglers named against the
// median of the machines training (two windows in a row, testers and lone machines left out),
// the transport's losses classed, the log lines' words, a refusal named once per sender and
// reason, and the figures store's rates and sink.
#include "sync/net_figures.hpp"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

namespace hogstream {
namespace HS_UNITY_ID {

std::vector<StragglerWatch::Rate> Rates(const std::vector<double>& per_s, int tested = -1, int idle = -1) {
  std::vector<StragglerWatch::Rate> v;
  for (size_t r = 0; r < per_s.size(); ++r) {
    StragglerWatch::Rate x;
    x.rank = static_cast<int>(r);
    x.iter_per_s = per_s[r];
    x.training = static_cast<int>(r) != idle;
    x.tested = static_cast<int>(r) == tested;
    v.push_back(x);
  }
  return v;
}

TEST(NetFiguresTest, AMachineBelowTheBoundTwoWindowsInARowLagsAndIsNamedOnce) {
  StragglerWatch w(0.5);
  EXPECT_TRUE(w.Window(Rates({10, 11, 4, 12})).empty()) << "one window below is not yet a lag";
  EXPECT_DOUBLE_EQ(w.median(), 10.5);
  EXPECT_FALSE(w.lags(2));
  const auto changes = w.Window(Rates({10, 11, 4, 12}));
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rank, 2);
  EXPECT_TRUE(changes[0].lags);
  EXPECT_EQ(changes[0].windows, kStragglerSeconds);
  EXPECT_EQ(changes[0].training, 4);
  EXPECT_TRUE(w.lags(2));
  EXPECT_TRUE(w.Window(Rates({10, 11, 4, 12})).empty()) << "named once";
  const auto back = w.Window(Rates({10, 11, 9, 12}));
  ASSERT_EQ(back.size(), 1u);
  EXPECT_FALSE(back[0].lags);
  EXPECT_FALSE(w.lags(2));
}

TEST(NetFiguresTest, ATestingMachineIsLeftOutAndOneTrainingAloneLagsNobody) {
  StragglerWatch w(0.5);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(w.Window(Rates({10, 2, 11}, /*tested=*/1)).empty()) << i;
  EXPECT_DOUBLE_EQ(w.median(), 10.5) << "the tester's rate is not counted for the median";
  EXPECT_FALSE(w.lags(1));
  // A window in which it tested counts neither for nor against it: below, tested, below are two
  // windows below in a row.
  StragglerWatch t(0.5);
  EXPECT_TRUE(t.Window(Rates({10, 2, 11})).empty());
  EXPECT_TRUE(t.Window(Rates({10, 2, 11}, 1)).empty());
  const auto named = t.Window(Rates({10, 2, 11}));
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].rank, 1);
  // Machines not training (done, joining) do not count, and one alone has nobody to lag behind.
  StragglerWatch alone(0.5);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(alone.Window(Rates({10, 2}, -1, /*idle=*/0)).empty()) << i;
  StragglerWatch never(0);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(never.Window(Rates({10, 2, 11})).empty()) << "bound 0: never";
}

TEST(NetFiguresTest, TheTransportsLossesAreClassedByKind) {
  std::array<uint64_t, static_cast<size_t>(Reject::kCount)> rejected{};
  rejected[static_cast<size_t>(Reject::kChecksum)] = 3;
  rejected[static_cast<size_t>(Reject::kJob)] = 5;
  rejected[static_cast<size_t>(Reject::kSender)] = 7;
  rejected[static_cast<size_t>(Reject::kMac)] = 11;
  rejected[static_cast<size_t>(Reject::kMagic)] = 13;
  rejected[static_cast<size_t>(Reject::kLength)] = 17;
  const FrameLosses l = ClassifyFrames(2, rejected, /*not_sync=*/19);
  EXPECT_EQ(l.lost, 2u + 3u) << "dropped on the way, or corrupt";
  EXPECT_EQ(l.foreign, 5u + 7u);
  EXPECT_EQ(l.mac, 11u);
  EXPECT_EQ(l.malformed, 13u + 17u + 19u);
  EXPECT_EQ(l.kernel, 0u);
  TransportCounters tc;
  tc.dropped = 2;
  tc.rejected = rejected;
  tc.kernel_dropped = 23;
  EXPECT_EQ(FrameLossesOf(tc, 0).kernel, 23u);
  EXPECT_EQ(FrameLossesOf(tc, 0).malformed, 13u + 17u);
}

TEST(NetFiguresTest, TheLogLinesSayWhatWasRefusedAndWhoLags) {
  NetJobStats s;
  s.leader = 1;
  s.foreign = 3;
  s.refused_mac = 2;
  s.control_refusals[static_cast<size_t>(ControlRefusal::kUnproven)] = 4;
  s.control_refusals[static_cast<size_t>(ControlRefusal::kReplay)] = 1;
  s.refused_value = 6;
  s.kernel_dropped = 9;
  const std::string refused = RefusedText(s);
  EXPECT_NE(refused.find("3 foreign, 2 bad MAC, 0 malformed, 5 control (4 "), std::string::npos) << refused;
  EXPECT_NE(refused.find("6 by value"), std::string::npos) << refused;
  EXPECT_NE(refused.find("9 datagrams dropped by the kernel"), std::string::npos) << refused;
  NetPeerFigures a, b, c, d;
  a.rank = 0, a.live = a.ready = true, a.iter_per_s = 12;
  b.rank = 1, b.live = b.ready = true, b.iter_per_s = 3, b.straggler = true;
  c.rank = 2, c.left = true;
  d.rank = 3;
  s.peers = {a, b, c, d};
  s.quorum = false;
  const std::string line = NetLine(s);
  EXPECT_NE(line.find("Network: machine 1 leads; iter/s: m0 12 m1 3 (lags) m2 left m3 dead;"), std::string::npos) << line;
  EXPECT_NE(line.find("NO QUORUM"), std::string::npos) << line;
  EXPECT_EQ(MachineName(2, {"a", "b", "udp://10.0.0.3:7000"}), "machine 2 (udp://10.0.0.3:7000)");
  EXPECT_EQ(MachineName(5, {"a"}), "machine 5");
}

TEST(NetFiguresTest, TheJobsLineSaysWhatThisMachineDid) {
  TransportCounters tc;
  tc.sent = 1000;
  tc.bytes_sent = 2'000'000'000;
  tc.bytes_received = 500'000'000;
  NetJobStats s;
  s.lost = 5;
  s.reshares = 2;
  const std::string line = JobLine("machine 1", 600, 10, tc, s);
  EXPECT_EQ(line.rfind("Network: machine 1 ran 600 iterations in 10.0 s (60.0 iter/s); sent 2.000 GB, received 0.500 GB "
                       "(2.000 Gbit/s); 5 frames lost (0.50% of sent); 2 re-shares; refused: 0 foreign",
                       0),
            0u)
      << line;
}

TEST(NetFiguresTest, ARefusalIsNamedOncePerSenderAndReason) {
  NetFigures f(0.5);
  EXPECT_TRUE(f.FirstRefusal(3, false));
  EXPECT_FALSE(f.FirstRefusal(3, false));
  EXPECT_TRUE(f.FirstRefusal(3, true)) << "another reason";
  EXPECT_TRUE(f.FirstRefusal(0, false)) << "another sender";
  EXPECT_FALSE(f.FirstRefusal(3, true));
  EXPECT_EQ(f.error(), "");
  f.set_error("machine 0 has reached no majority");
  EXPECT_EQ(f.error(), "machine 0 has reached no majority");
}

}  // namespace
// The daemon's lines for the log name the machines and figures of the change.
TEST(NetFiguresTest, TheDaemonsLinesNameWhatChanged) {
  EXPECT_EQ(ReshareLine({0, 2, 3}, "machine 2", 4, 12), "chunks re-shared among machines 0 2 3; machine 2 masters 4 of 12");
  EXPECT_EQ(TrainingLine(3, "machine 0", 5, 16, 256, false), "all 3 machines heard from; machine 0 masters 5 of 16 chunks of 256 floats");
  EXPECT_NE(TrainingLine(3, "machine 0", 5, 16, 256, true).find("256 floats at most, cut at parameter boundaries"),
            std::string::npos);
  EXPECT_EQ(QuorumLostLine("machine 1", 1, 3).rfind("machine 1 reaches 1 of 3 machines, not a majority", 0), 0u);
  EXPECT_EQ(GaveUpLine("machine 1", 3, 1500).rfind("machine 1 has reached no majority of the job's 3 machines for 1.5 s", 0), 0u);
  EXPECT_EQ(OtherLeaveLine("machine 2", true, 300, 120).rfind("machine 2 leaves the job on notice at iteration 300;", 0), 0u);
  EXPECT_EQ(OtherLeaveLine("machine 2", false, 300, 120).rfind("machine 2 has left the job after 120 iterations;", 0), 0u);
  EXPECT_EQ(RefusalLine("machine 3", true, "delta", 7).rfind("refused an absurd delta from machine 3 (chunk 7, RMS over the bound)", 0), 0u);
  EXPECT_EQ(RefusalLine("machine 3", false, "delta", 7).rfind("refused a non-finite delta from machine 3 (chunk 7)", 0), 0u);
}

}  // namespace hogstream
