// The log parser on our own log lines and on an excerpt in real Caffe's shape (its solver.cpp
// lines, no Progress), including a run that crosses midnight and one that crosses New Year.
#include "observe/log_parse.hpp"

#include <gtest/gtest.h>

#include <sstream>

#include "base/common.hpp"
#include "observe/stats_json.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

TrainingLog Parse(const std::string& text) {
  std::istringstream in(text);
  return ParseTrainingLog(in);
}

// A `caffe train` log as Caffe 1.0 writes it (abridged), crossing midnight between the test at
// iteration 500 and the display at 600.
const char kCaffeLog[] = R"(I1123 23:58:50.000000 12192 caffe.cpp:218] Using GPUs 0
I1123 23:59:00.100000 12192 solver.cpp:44] Initializing solver from parameters:
I1123 23:59:00.000000 12192 solver.cpp:292] Solving LeNet
I1123 23:59:00.500000 12192 solver.cpp:330] Iteration 0, Testing net (#0)
I1123 23:59:01.000000 12192 solver.cpp:397]     Test net output #0: accuracy = 0.0853
I1123 23:59:01.000000 12192 solver.cpp:397]     Test net output #1: loss = 2.30575 (* 1 = 2.30575 loss)
I1123 23:59:01.200000 12192 solver.cpp:218] Iteration 0 (-1.4013e-45 iter/s, 0.4s/100 iters), loss = 2.29582
I1123 23:59:01.200000 12192 solver.cpp:237]     Train net output #0: loss = 2.29582 (* 1 = 2.29582 loss)
I1123 23:59:01.200100 12192 sgd_solver.cpp:105] Iteration 0, lr = 0.01
I1123 23:59:30.000000 12192 solver.cpp:218] Iteration 100 (3.4 iter/s, 28.8s/100 iters), loss = 0.210
I1123 23:59:30.000000 12192 solver.cpp:237]     Train net output #0: loss = 0.210 (* 1 = 0.210 loss)
I1123 23:59:30.000100 12192 sgd_solver.cpp:105] Iteration 100, lr = 0.00992565
I1123 23:59:59.500000 12192 solver.cpp:330] Iteration 500, Testing net (#0)
I1123 23:59:59.900000 12192 blocking_queue.cpp:49] Waiting for data
I1124 00:00:02.000000 12192 solver.cpp:397]     Test net output #0: accuracy = 0.9731
I1124 00:00:02.000000 12192 solver.cpp:397]     Test net output #1: loss = 0.0855 (* 1 = 0.0855 loss)
I1124 00:00:10.000000 12192 solver.cpp:218] Iteration 600 (3.3 iter/s, 30s/100 iters), loss = 0.125
I1124 00:00:10.000100 12192 sgd_solver.cpp:105] Iteration 600, lr = 0.00956
I1124 00:00:20.000000 12192 solver.cpp:447] Snapshotting to binary proto file lenet_iter_600.caffemodel
I1124 00:00:20.500000 12192 solver.cpp:310] Iteration 600, loss = 0.120
I1124 00:00:20.600000 12192 solver.cpp:330] Iteration 600, Testing net (#0)
I1124 00:00:21.000000 12192 solver.cpp:397]     Test net output #0: accuracy = 0.98
I1124 00:00:21.000000 12192 solver.cpp:397]     Test net output #1: loss = 0.07 (* 1 = 0.07 loss)
I1124 00:00:21.000000 12192 solver.cpp:315] Optimization Done.
)";

TEST(LogParse, RealCaffeLog) {
  const TrainingLog log = Parse(kCaffeLog);
  ASSERT_EQ(log.train_loss.size(), 4u);  // three displays and the final "Iteration 600, loss"
  EXPECT_EQ(log.train_loss[1].iter, 100);
  EXPECT_DOUBLE_EQ(log.train_loss[1].value, 0.210);
  // Seconds from the "Solving" line, as Caffe's extract_seconds counts them.
  EXPECT_NEAR(log.train_loss[1].seconds, 30.0, 1e-6);
  // Across midnight: 23:59:00 -> 00:00:10 next day is 70 s, not -86330.
  EXPECT_NEAR(log.train_loss[2].seconds, 70.0, 1e-6);
  ASSERT_EQ(log.lr.size(), 3u);
  EXPECT_EQ(log.lr[2].iter, 600);
  EXPECT_DOUBLE_EQ(log.lr[2].value, 0.00956);
  ASSERT_EQ(log.test.count("accuracy"), 1u);
  const auto& acc = log.test.at("accuracy");
  ASSERT_EQ(acc.size(), 3u);
  EXPECT_EQ(acc[0].iter, 0);
  EXPECT_EQ(acc[1].iter, 500);
  EXPECT_DOUBLE_EQ(acc[1].value, 0.9731);
  EXPECT_NEAR(acc[1].seconds, 62.0, 1e-6);
  EXPECT_EQ(acc[2].iter, 600);
  EXPECT_TRUE(log.test_losses.count("loss"));
  EXPECT_FALSE(log.test_losses.count("accuracy"));
  EXPECT_DOUBLE_EQ(log.test.at("loss")[1].value, 0.0855);
  EXPECT_TRUE(log.img_per_s.empty());  // Caffe has no Progress line
  ASSERT_EQ(log.train_outputs.at("loss").size(), 2u);
}

// Our Hogwild log: glog with the year in the prefix (log_year_in_prefix, glog's default), two
// test nets, Progress lines with per-solver figures, and a segment line to skip.
TEST(LogParse, OurHogwildLog) {
  const TrainingLog log = Parse(R"(I20241231 23:59:59.000000 100 solver.cpp:500] Solving LeNet
I20241231 23:59:59.000000 101 solver.cpp:500] Solving LeNet
I20241231 23:59:59.500000 100 solver.cpp:560] Iteration 0, Testing net (#0)
I20241231 23:59:59.600000 100 solver.cpp:570]     Test net output #0: accuracy = 0.1
I20241231 23:59:59.600000 100 solver.cpp:570]     Test net output #1: loss = 2.3 (* 1 = 2.3 loss)
I20241231 23:59:59.600000 100 solver.cpp:560] Iteration 0, Testing net (#1)
I20241231 23:59:59.700000 100 solver.cpp:570]     Test net output #0: accuracy = 0.2
I20250101 00:00:09.000000 100 solver.cpp:250] Iteration 200 (20 iter/s, 10s/100 iters), loss = 0.5
I20250101 00:00:09.000000 100 solver.cpp:255]     Train net output #0: loss = 0.4 (* 1 = 0.4 loss)
I20250101 00:00:09.000000 100 solver.cpp:290] Progress: 200/600 iterations, 1280 img/s, ETA 0h00m20s; per solver img/s: 640 640
I20250101 00:00:09.000000 100 solver.cpp:300] Segments: [solver 0: 10 sweeps, 5.0 sweeps/s, 3 MiB, 40 chunks, 0 lost]
I20250101 00:00:09.000100 100 solver.cpp:170] Iteration 200, lr = 0.0098
)");
  ASSERT_EQ(log.train_loss.size(), 1u);
  EXPECT_EQ(log.train_loss[0].iter, 200);
  EXPECT_DOUBLE_EQ(log.train_loss[0].value, 0.5);
  EXPECT_NEAR(log.train_loss[0].seconds, 10.0, 1e-6);  // across New Year's midnight
  ASSERT_EQ(log.img_per_s.size(), 1u);
  EXPECT_EQ(log.img_per_s[0].iter, 200);
  EXPECT_DOUBLE_EQ(log.img_per_s[0].value, 1280);
  ASSERT_EQ(log.test.count("accuracy (net 1)"), 1u);
  EXPECT_DOUBLE_EQ(log.test.at("accuracy (net 1)")[0].value, 0.2);
  EXPECT_DOUBLE_EQ(log.test.at("accuracy")[0].value, 0.1);
  ASSERT_EQ(log.lr.size(), 1u);
  EXPECT_DOUBLE_EQ(log.lr[0].value, 0.0098);
}

// glog's default prefix has no year: December to January is the next year, not eleven months
// back.
TEST(LogParse, NewYearWithoutYearInPrefix) {
  const TrainingLog log = Parse(R"(I1231 23:59:50.000000 1 solver.cpp:1] Solving x
I1231 23:59:55.000000 1 solver.cpp:2] Iteration 10 (1 iter/s, 1s/10 iters), loss = 1
I0101 00:00:05.000000 1 solver.cpp:2] Iteration 20 (1 iter/s, 1s/10 iters), loss = 0.5
)");
  ASSERT_EQ(log.train_loss.size(), 2u);
  EXPECT_NEAR(log.train_loss[0].seconds, 5.0, 1e-6);
  EXPECT_NEAR(log.train_loss[1].seconds, 15.0, 1e-6);
}

// A --stats_json file read back: the records the sink writes (train, test of two nets, the
// network's, a cut last line) become the same series a log gives.
TEST(LogParse, StatsJsonRecords) {
  std::string text;
  for (int it = 100; it <= 300; it += 100) {
    TrainFigures t;
    t.iter = it;
    t.seconds = it / 50.0;
    t.loss = 1.0f / static_cast<float>(it);
    t.lr = 0.01f;
    t.img_per_s = 1000 + it;
    t.outputs = {{"loss", t.loss}};
    text += JsonLinesSink::TrainLine(t, 1.7e9) + "\n";
    NetworkFigures n;
    n.global_iter = it;
    text += JsonLinesSink::NetworkLine(n, 1.7e9) + "\n";
  }
  for (int net = 0; net < 2; ++net) {
    TestFigures g;
    g.iter = 300;
    g.seconds = 6.5;
    g.net = net;
    g.outputs = {{"accuracy", 0.5f + 0.25f * static_cast<float>(net)}, {"loss", 0.75f}};
    text += JsonLinesSink::TestLine(g, 1.7e9) + "\n";
  }
  text += "some other program's line\n{\"type\":\"train\",\"iter\":40";  // cut short
  std::istringstream in(text);
  const TrainingLog log = ParseStatsJson(in);
  ASSERT_EQ(log.train_loss.size(), 3u);
  EXPECT_EQ(log.train_loss[2].iter, 300);
  EXPECT_DOUBLE_EQ(log.train_loss[2].seconds, 6);
  EXPECT_NEAR(log.train_loss[0].value, 0.01, 1e-7);
  ASSERT_EQ(log.lr.size(), 3u);
  ASSERT_EQ(log.img_per_s.size(), 3u);
  EXPECT_DOUBLE_EQ(log.img_per_s[1].value, 1200);
  ASSERT_EQ(log.train_outputs.at("loss").size(), 3u);
  ASSERT_EQ(log.test.at("accuracy").size(), 1u);
  EXPECT_DOUBLE_EQ(log.test.at("accuracy")[0].value, 0.5);
  EXPECT_DOUBLE_EQ(log.test.at("accuracy")[0].seconds, 6.5);
  EXPECT_DOUBLE_EQ(log.test.at("accuracy (net 1)")[0].value, 0.75);
  EXPECT_TRUE(log.test_losses.count("loss"));
  EXPECT_TRUE(log.test_losses.count("loss (net 1)"));
  EXPECT_FALSE(log.test_losses.count("accuracy"));
  EXPECT_EQ(log.points(), 3u * 3 + 4);  // loss, lr, img/s; four test outputs
}

TEST(LogParse, NotALogHasNoPoints) {
  EXPECT_EQ(Parse("hello\nIteration\nloss = \n\x01\x02\n").points(), 0u);
  EXPECT_EQ(Parse("").points(), 0u);
}

TEST(LogParse, MissingFileIsAnError) {
  EXPECT_THROW(ParseTrainingLogFile("/nonexistent/hs_no_such.log"), Error);
}

TEST(LogParse, GlogTimeRejectsOtherLines) {
  double t = 0;
  int month = 0;
  EXPECT_FALSE(GlogTime("Iteration 100, loss = 2", 2001, &t, &month));
  EXPECT_FALSE(GlogTime("I1399 12:00:00.0 1 x.cpp:1] bad month", 2001, &t, &month));
  EXPECT_TRUE(GlogTime("W1123 12:14:59.489733 12192 solver.cpp:238] x", 2001, &t, &month));
  double t2 = 0;
  EXPECT_TRUE(GlogTime("W1123 12:15:00.489733 12192 solver.cpp:238] x", 2001, &t2, &month));
  EXPECT_NEAR(t2 - t, 1.0, 1e-9);
}

}  // namespace
}  // namespace hogstream
