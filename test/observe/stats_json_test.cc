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
namespace {

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
