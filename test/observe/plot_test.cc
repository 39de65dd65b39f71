// `hogstream plot` end to end: PNG and SVG written and well-formed, one colour per log, the
// number of series it reports; bad input is one line "hogstream: ..." and exit 1.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <tuple>

#include "observe/stats_json.hpp"
#include "test/program_runner.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using test::Finished;
using test::RunProgram;
using test::ScratchDir;

// A log in our format with every quantity `plot` draws: test accuracy and loss, train loss,
// lr and Progress.
std::string OurLog(double scale) {
  std::ostringstream os;
  os << "I1123 10:00:00.000000  1 solver.cpp:1] Solving LeNet\n";
  for (int it = 0; it <= 600; it += 100) {
    const int s = it / 10;
    char ts[64];
    std::snprintf(ts, sizeof ts, "I1123 10:%02d:%02d.000000  1 solver.cpp:2] ", s / 60, s % 60);
    if (it % 200 == 0) {
      os << ts << "Iteration " << it << ", Testing net (#0)\n";
      os << ts << "    Test net output #0: accuracy = " << 0.5 + scale * it / 2000 << "\n";
      os << ts << "    Test net output #1: loss = " << 2.0 - scale * it / 400
         << " (* 1 = 1 loss)\n";
    }
    os << ts << "Iteration " << it << " (10 iter/s, 10s/100 iters), loss = " << 2.2 - scale * it / 350 << "\n";
    os << ts << "    Train net output #0: loss = 1.5 (* 1 = 1.5 loss)\n";
    if (it > 0) os << ts << "Progress: " << it << "/600 iterations, " << 600 * scale << " img/s, ETA 0h00m10s\n";
    os << ts << "Iteration " << it << ", lr = " << 0.01 / (1 + it * 1e-4 * scale) << "\n";
  }
  return os.str();
}

std::string Write(const ScratchDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir / name;
  std::ofstream(path) << text;
  return path;
}

// The distinct colours lines are stroked with, leaving out greys (r = g = b: axes, grid, text
// keys), so what remains are the logs' colours.
std::set<std::tuple<double, double, double>> SeriesColours(const std::string& svg) {
  std::set<std::tuple<double, double, double>> colours;
  const std::regex stroke(R"(stroke:rgb\(([0-9.]+)%,([0-9.]+)%,([0-9.]+)%\))");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), stroke); it != std::sregex_iterator(); ++it) {
    const double r = std::stod((*it)[1]), g = std::stod((*it)[2]), b = std::stod((*it)[3]);
    if (r == g && g == b) continue;
    colours.insert({r, g, b});
  }
  return colours;
}

void ExpectOneLineError(const Finished& r, const std::string& needle) {
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(r.last_line().rfind("hogstream: ", 0), 0u) << r.err;
  EXPECT_NE(r.last_line().find(needle), std::string::npos) << r.err;
  // One line: nothing else on stderr.
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
}

TEST(Plot, PngOfTwoLogs) {
  ScratchDir dir("plot");
  const std::string a = Write(dir, "one_solver.log", OurLog(1.0));
  const std::string b = Write(dir, "two_solvers.log", OurLog(1.5));
  const std::string png = dir / "curves.png";
  const Finished r = RunProgram(HS_HOGSTREAM_BIN, {"plot", a, b, "-o", png}, dir, 60);
  ASSERT_EQ(r.rc, 0) << r.err;
  // Default --y=accuracy,loss: per log one accuracy, a train and a test loss.
  EXPECT_NE(r.out.find("(6 series from 2 logs)"), std::string::npos) << r.out;
  const std::string bytes = test::ReadFile(png);
  ASSERT_GT(bytes.size(), 5000u);
  ASSERT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  ASSERT_EQ(bytes.substr(12, 4), "IHDR");
  auto be32 = [&](size_t at) {
    return (static_cast<uint32_t>(static_cast<unsigned char>(bytes[at])) << 24) |
           (static_cast<unsigned char>(bytes[at + 1]) << 16) |
           (static_cast<unsigned char>(bytes[at + 2]) << 8) | static_cast<unsigned char>(bytes[at + 3]);
  };
  EXPECT_EQ(be32(16), 960u);   // width
  EXPECT_GT(be32(20), 500u);   // height: legend + two stacked panels
  EXPECT_EQ(bytes.substr(bytes.size() - 8, 4), "IEND");
}

// One job's machines: the leader's log beside two other machines' --stats_json files (their own
// train records only: no tests), each file one colour.
TEST(Plot, ALeadersLogAndTwoMachinesStatsFiles) {
  ScratchDir dir("plot");
  const std::string lead = Write(dir, "m0.log", OurLog(1.0));
  std::string m1, m2;
  for (int it = 100; it <= 600; it += 100) {
    TrainFigures t;
    t.iter = it;
    t.seconds = it / 40.0;
    t.loss = 2.0f / static_cast<float>(it);
    t.leads = false;
    m1 += JsonLinesSink::TrainLine(t, 1.7e9) + "\n";
    t.loss *= 1.1f;
    m2 += JsonLinesSink::TrainLine(t, 1.7e9) + "\n";
    NetworkFigures n;
    n.global_iter = it;
    m2 += JsonLinesSink::NetworkLine(n, 1.7e9) + "\n";
  }
  const std::string a = Write(dir, "m1.json", m1), b = Write(dir, "m2.json", m2);
  const std::string png = dir / "job.png";
  const Finished r = RunProgram(HS_HOGSTREAM_BIN, {"plot", lead, a, b, "-o", png, "--y=loss"}, dir, 60);
  ASSERT_EQ(r.rc, 0) << r.err;
  // The log: a train and a test loss; each stats file: its train loss.
  EXPECT_NE(r.out.find("(4 series from 3 logs)"), std::string::npos) << r.out;
  EXPECT_EQ(test::ReadFile(png).substr(1, 3), "PNG");
}

TEST(Plot, SvgOfEveryQuantityAgainstSeconds) {
  ScratchDir dir("plot");
  const std::string a = Write(dir, "a.log", OurLog(1.0));
  const std::string b = Write(dir, "b.log", OurLog(2.0));
  const std::string c = Write(dir, "c.log", OurLog(0.5));
  const std::string svg = dir / "curves.svg";
  const Finished r = RunProgram(HS_HOGSTREAM_BIN,
                                {"plot", a, b, c, "-o", svg, "--x=seconds", "--y=accuracy,loss,lr,img/s"},
                                dir, 60);
  ASSERT_EQ(r.rc, 0) << r.err;
  // Per log: accuracy 1, loss 2 (train, test), lr 1, img/s 1.
  EXPECT_NE(r.out.find("(15 series from 3 logs)"), std::string::npos) << r.out;
  const std::string text = test::ReadFile(svg);
  ASSERT_EQ(text.rfind("<?xml", 0), 0u);
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
  // XML-ish: every element that opens closes (self-closing ones count as both).
  const std::regex open(R"(<([a-zA-Z]+)[^>]*[^/]>|<([a-zA-Z]+)>)"), close(R"(</[a-zA-Z]+>)");
  const auto opens = std::distance(std::sregex_iterator(text.begin(), text.end(), open), std::sregex_iterator());
  const auto closes = std::distance(std::sregex_iterator(text.begin(), text.end(), close), std::sregex_iterator());
  EXPECT_EQ(opens, closes);
  EXPECT_EQ(SeriesColours(text).size(), 3u) << "one colour per log";
}

TEST(Plot, RealCaffeLogAlone) {
  ScratchDir dir("plot");
  const std::string log = Write(dir, "caffe.log",
                                "I1123 23:59:00.000000 12192 solver.cpp:292] Solving LeNet\n"
                                "I1123 23:59:30.000000 12192 solver.cpp:218] Iteration 100 (3.4 iter/s, "
                                "28.8s/100 iters), loss = 0.210\n"
                                "I1124 00:00:10.000000 12192 solver.cpp:218] Iteration 200 (3.3 iter/s, "
                                "30s/100 iters), loss = 0.125\n");
  const std::string svg = dir / "loss.svg";
  const Finished r = RunProgram(HS_HOGSTREAM_BIN, {"plot", log, "-o", svg, "--y=loss"}, dir, 60);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("(1 series from 1 log)"), std::string::npos) << r.out;
  EXPECT_EQ(SeriesColours(test::ReadFile(svg)).size(), 1u);
}

TEST(Plot, BadInputIsOneLine) {
  ScratchDir dir("plot");
  const std::string good = Write(dir, "good.log", OurLog(1.0));
  const std::string junk = Write(dir, "junk.log", "hello\nthis is no training log\n");
  const std::string png = dir / "x.png";
  ExpectOneLineError(RunProgram(HS_HOGSTREAM_BIN, {"plot", dir / "missing.log", "-o", png}, dir),
                     "missing.log");
  ExpectOneLineError(RunProgram(HS_HOGSTREAM_BIN, {"plot", junk, "-o", png}, dir), "no data points");
  ExpectOneLineError(RunProgram(HS_HOGSTREAM_BIN, {"plot", good, "-o", png, "--y=accuracy,speed"}, dir),
                     "unknown --y quantity 'speed'");
  ExpectOneLineError(RunProgram(HS_HOGSTREAM_BIN, {"plot", good, "-o", png, "--x=epochs"}, dir), "--x");
  ExpectOneLineError(RunProgram(HS_HOGSTREAM_BIN, {"plot", good, "-o", dir / "x.jpg"}, dir), ".png or .svg");
  ExpectOneLineError(RunProgram(HS_HOGSTREAM_BIN, {"plot", good}, dir), "-o");
  ExpectOneLineError(RunProgram(HS_HOGSTREAM_BIN, {"plot", good, "-o", dir / "no_dir/x.png"}, dir),
                     "cannot write");
  EXPECT_FALSE(test::fs::exists(png)) << "a failed plot leaves no file";
}

}  // namespace
}  // namespace hogstream
