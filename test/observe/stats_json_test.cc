// --stats_json: every line is one JSON object with the documented keys; train records come in
// increasing iteration order; test records carry each output by name.
#include "observe/stats_json.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/common.hpp"
#include "test/program_runner.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using Json = nlohmann::json;  // an independent reader of what the sink writes

std::vector<Json> Lines(const std::string& text) {
  std::vector<Json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    SCOPED_TRACE(line);
    EXPECT_NO_THROW(out.push_back(Json::parse(line)));
  }
  return out;
}

TEST(StatsJson, RecordsAreJson) {
  TrainFigures f;
  f.iter = 300;
  f.max_iter = 1000;
  f.loss = std::nanf("");  // a diverged loss is null, not "nan"
  f.lr = 0.01f;
  f.outputs = {{"acc\"top\\5", 0.5f}, {"prob", 0.1f}, {"prob", 0.9f}};
  f.solvers = {{0, 150, 100.5}, {1, 150, 99.5}};
  f.segments = {{1, 4096, 3, 1, 2, 0, 250.0}};
  const Json t = Json::parse(JsonLinesSink::TrainLine(f, 1700000000.25));
  EXPECT_EQ(t["type"], "train");
  EXPECT_EQ(t["iter"], 300);
  EXPECT_TRUE(t["loss"].is_null());
  EXPECT_DOUBLE_EQ(t["time"].get<double>(), 1700000000.25);  // not rounded to %g's 9 digits
  EXPECT_TRUE(t["outputs"].contains("acc\"top\\5"));  // escaped and read back
  EXPECT_FLOAT_EQ(t["outputs"]["prob[1]"].get<double>(), 0.9f);  // repeated names stay distinct
  ASSERT_EQ(t["solvers"].size(), 2u);
  EXPECT_EQ(t["solvers"][1]["rank"], 1);
  ASSERT_EQ(t["segments"].size(), 1u);
  for (const char* k : {"rank", "bytes", "chunks", "dropped", "sweeps", "stale", "sweeps_per_s"})
    EXPECT_TRUE(t["segments"][0].contains(k)) << k;
  EXPECT_EQ(t["segments"][0]["bytes"], 4096);

  TestFigures g;
  g.iter = 400;
  g.net = 1;
  g.outputs = {{"accuracy", 0.75f}};
  const Json u = Json::parse(JsonLinesSink::TestLine(g, 1.0));
  EXPECT_EQ(u["type"], "test");
  EXPECT_EQ(u["net"], 1);
  EXPECT_FLOAT_EQ(u["outputs"]["accuracy"].get<double>(), 0.75f);
}

// A machine's exchange as one record: its own figures, and per machine of the job its rate and
// its deltas' staleness histogram over the bounds the record names.
TEST(StatsJson, NetworkRecordNamesEveryMachine) {
  NetworkFigures f;
  f.machine = 1;
  f.leader = 0;
  f.global_iter = 1234;
  f.sweeps_per_s = 17.5;
  f.gbit_out = std::nan("");  // not measured yet: null
  f.bytes_sent = 5000000000ull;  // beyond 32 bits
  f.refused_value = 3;
  for (int r = 0; r < 3; ++r) {
    PeerNetFigures p;
    p.rank = r;
    p.name = "m" + std::to_string(r);
    p.self = r == 1;
    p.live = r != 2;
    p.leader = r == 0;
    p.iter_per_s = 25.25 * r;
    p.deltas_applied = p.self ? 0 : 10u + static_cast<uint64_t>(r);
    p.staleness_sum = 4 * p.deltas_applied;
    p.staleness[StalenessBucket(4)] = p.deltas_applied;
    f.peers.push_back(p);
  }
  const Json n = Json::parse(JsonLinesSink::NetworkLine(f, 1700000000.5));
  EXPECT_EQ(n["type"], "network");
  EXPECT_EQ(n["machine"], 1);
  EXPECT_EQ(n["iter"], 1234);
  EXPECT_TRUE(n["gbit_out"].is_null());
  EXPECT_EQ(n["bytes_sent"].get<uint64_t>(), 5000000000ull);
  EXPECT_EQ(n["refused_value"], 3);
  const std::vector<uint64_t> bounds = n["staleness_bounds"];
  ASSERT_EQ(bounds.size() + 1, kStalenessBuckets);
  ASSERT_EQ(n["peers"].size(), 3u);
  for (int r = 0; r < 3; ++r) {
    const Json& p = n["peers"][r];
    SCOPED_TRACE(p.dump());
    EXPECT_EQ(p["rank"], r);
    EXPECT_EQ(p["name"], "m" + std::to_string(r));
    EXPECT_EQ(p["self"], r == 1);
    EXPECT_EQ(p["live"], r != 2);
    EXPECT_DOUBLE_EQ(p["iter_per_s"].get<double>(), 25.25 * r);
    const std::vector<uint64_t> buckets = p["staleness_buckets"];
    ASSERT_EQ(buckets.size(), kStalenessBuckets);
    // Age 4 falls in the bucket whose bound is 4 (bounds are inclusive, as Prometheus's le).
    for (size_t b = 0; b < buckets.size(); ++b)
      EXPECT_EQ(buckets[b], b < bounds.size() && bounds[b] == 4 ? p["deltas_applied"].get<uint64_t>() : 0u) << b;
    EXPECT_DOUBLE_EQ(p["staleness_mean"].get<double>(), r == 1 ? 0 : 4);
  }
  EXPECT_EQ(StalenessBucket(0), 0u);
  EXPECT_EQ(StalenessBucket(1), 0u);
  EXPECT_EQ(StalenessBucket(2), 1u);
  EXPECT_EQ(StalenessBucket(3), 2u);
  EXPECT_EQ(StalenessBucket(128), kStalenessBuckets - 2);
  EXPECT_EQ(StalenessBucket(129), kStalenessBuckets - 1);
}

TEST(StatsJson, UnwritableFileIsAnError) {
  EXPECT_THROW(JsonLinesSink("/nonexistent/dir/stats.jsonl"), Error);
}

// A real run, one solver (`hogstream train`) and two with private copies (hogwild.bin).
void CheckRun(const std::string& program, const std::vector<std::string>& args, int solvers,
              bool segments) {
  test::ScratchDir dir("stats");
  const std::string jsonl = dir / "stats.jsonl";
  std::vector<std::string> argv = args;
  // A group's leader displays only at iterations it claims itself. This net runs 1000
  // iterations in ~30 ms, which a descheduled leader (2 cores, 2 solvers, 2 segment daemons)
  // can miss entirely; 5000 leave it enough.
  const int max_iter = solvers > 1 ? 5000 : 100;
  const std::string solver = test::ThreeOutputSolver(dir, max_iter);
  for (std::string& a : argv)
    if (a.find("SOLVER") != std::string::npos) a.replace(a.find("SOLVER"), 6, solver);
  argv.push_back("--stats_json=" + jsonl);
  const test::Finished r = test::RunProgram(program, argv, dir, 120);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::vector<Json> lines = Lines(test::ReadFile(jsonl));
  int train = 0, tests = 0;
  double last_iter = -1, last_elapsed = -1;
  for (const Json& j : lines) {
    if (j["type"] == "train") {
      ++train;
      for (const char* k : {"iter", "max_iter", "time", "elapsed", "loss", "lr", "img_per_s",
                            "leader", "outputs", "solvers", "segments"})
        EXPECT_TRUE(j.contains(k)) << k;
      EXPECT_GT(j["iter"].get<double>(), last_iter) << "train records in increasing iteration order";
      EXPECT_GE(j["elapsed"].get<double>(), last_elapsed);
      last_iter = j["iter"].get<double>();
      last_elapsed = j["elapsed"].get<double>();
      EXPECT_EQ(j["max_iter"], max_iter);
      EXPECT_GT(j["lr"].get<double>(), 0);
      EXPECT_TRUE(j["outputs"].contains("aux") && j["outputs"].contains("loss") &&
                  j["outputs"].contains("top1_accuracy"));
      EXPECT_EQ(j["solvers"].size(), static_cast<size_t>(solvers > 1 ? solvers : 0));
      EXPECT_EQ(j["segments"].empty(), !segments);
    } else {
      ASSERT_EQ(j["type"], "test");
      ++tests;
      const Json& o = j["outputs"];
      EXPECT_EQ(o.size(), 3u);
      EXPECT_GE(o["top1_accuracy"].get<double>(), 0);
      EXPECT_LE(o["top1_accuracy"].get<double>(), 1);
    }
  }
  // Alone: displays at 0, 10, ..., 90 and tests at 0, 20, ..., 80 and the final one at 100.
  // In a group the leader displays and tests at the first iteration it claims past each
  // multiple, so a busy machine can starve it of all but its first display and the final test.
  EXPECT_GE(train, solvers > 1 ? 1 : 10);
  EXPECT_GE(tests, solvers > 1 ? 1 : 6);
}

TEST(StatsJson, OneSolverTrain) {
  CheckRun(HS_HOGSTREAM_BIN, {"train", "--solver=SOLVER"}, 1, false);
}

TEST(StatsJson, TwoPrivateCopies) {
  CheckRun(HS_HOGWILD_BIN, {"SOLVER", "2", "--private", "--chunk=64"}, 2, true);
}

}  // namespace
}  // namespace hogstream
