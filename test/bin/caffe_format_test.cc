// Caffe's log tools read our logs. tools/extra/parse_log.sh greps "Test net output #0" and takes
// whitespace field 11 as the test accuracy (#1 as the test loss), takes the text after '=' on
// ", loss = " lines and field 9 of ", lr = " lines; parse_log.py matches
// "(Train|Test) net output #(\d+): (\S+) = ([\.\deE+-]+)" and "Iteration (\d+)". Caffe numbers
// the outputs in blob-name order (a std::set), so #k must count by name whatever the net's
// order; and `hogstream test` prints `caffe test`'s lines. The net here has three outputs in
// non-alphabetical order (loss, top1_accuracy, aux) with distinct loss weights (1, 0, 0.5).
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <sstream>

#include "test/program_runner.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

std::vector<std::string> Fields(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> f;
  for (std::string w; in >> w;) f.push_back(w);
  return f;
}

std::vector<std::string> LinesWith(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos) out.push_back(line);
  return out;
}

bool IsNumber(const std::string& s) {
  static const std::regex number(R"([-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?)");
  return std::regex_match(s, number);
}

const std::vector<std::string> kSorted = {"aux", "loss", "top1_accuracy"};
const std::map<std::string, double> kWeight = {{"aux", 0.5}, {"loss", 1}, {"top1_accuracy", 0}};

// "NAME = V" then, for a loss, " (* W = W*V loss)" with Caffe's weight and product: the value
// belongs to the name (aux's weight 0.5 would not fit loss's value).
void CheckValueLine(const std::string& rest, const std::string& name) {
  SCOPED_TRACE(rest);
  static const std::regex line(R"(^(\S+) = ([-+.\deE]+)(?: \(\* ([-+.\deE]+) = ([-+.\deE]+) loss\))?$)");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(rest, m, line));
  EXPECT_EQ(m[1].str(), name);
  const double v = std::stod(m[2].str());
  if (kWeight.at(name) == 0) {
    EXPECT_FALSE(m[3].matched);
    EXPECT_GE(v, 0);
    EXPECT_LE(v, 1);
  } else {
    ASSERT_TRUE(m[3].matched);
    EXPECT_DOUBLE_EQ(std::stod(m[3].str()), kWeight.at(name));
    EXPECT_NEAR(std::stod(m[4].str()), kWeight.at(name) * v, 1e-4 * std::max(1.0, std::fabs(v)));
  }
}

TEST(CaffeFormat, TrainAndTestLogsReadAsCaffeToolsReadThem) {
  test::ScratchDir dir("caffefmt");
  const std::string solver = test::ThreeOutputSolver(dir, 40, "snapshot: 40\n");
  const test::Finished train = test::RunProgram(HS_HOGSTREAM_BIN, {"train", "--solver=" + solver}, dir, 120);
  ASSERT_EQ(train.rc, 0) << train.err;
  const std::string& log = train.err;

  // parse_log.py's regexes, with the glog prefix parse_log.sh counts fields over.
  const std::regex train_out(R"(Train net output #(\d+): (\S+) = ([\.\deE+-]+))");
  const std::regex test_out(R"(Test net output #(\d+): (\S+) = ([\.\deE+-]+))");
  for (const auto& [needle, re] : {std::pair{"Train net output #", &train_out}, {"Test net output #", &test_out}}) {
    const std::vector<std::string> lines = LinesWith(log, needle);
    ASSERT_FALSE(lines.empty()) << needle;
    ASSERT_EQ(lines.size() % 3, 0u) << needle;
    for (size_t i = 0; i < lines.size(); ++i) {
      SCOPED_TRACE(lines[i]);
      std::smatch m;
      ASSERT_TRUE(std::regex_search(lines[i], m, *re));
      EXPECT_EQ(std::stoul(m[1].str()), i % 3) << "outputs numbered 0, 1, 2 in each block";
      EXPECT_EQ(m[2].str(), kSorted[i % 3]) << "#k counts in blob-name order, as Caffe does";
      // parse_log.sh: `awk '{print $11}'` is the value; $9 the name.
      const std::vector<std::string> f = Fields(lines[i]);
      ASSERT_GE(f.size(), 11u);
      EXPECT_EQ(f[8], kSorted[i % 3]);
      EXPECT_TRUE(IsNumber(f[10])) << f[10];
      CheckValueLine(lines[i].substr(lines[i].find(": ", lines[i].find("output #")) + 2), kSorted[i % 3]);
    }
  }
  // Four test passes (0, 20, 40 and none twice): parse_log.sh pairs the "Testing net" lines
  // with #0 and #1 rows one for one.
  EXPECT_EQ(LinesWith(log, "Testing net (#0)").size(), LinesWith(log, "Test net output #0").size());
  // ", loss = " lines: the text after '=' is the number; ", lr = " lines: field 9 is.
  const std::vector<std::string> losses = LinesWith(log, ", loss = ");
  ASSERT_GE(losses.size(), 4u);
  for (const std::string& l : losses) {
    std::string after = l.substr(l.find('=') + 1);
    EXPECT_TRUE(IsNumber(after.substr(1))) << l;
    EXPECT_NE(l.find("Iteration "), std::string::npos) << l;
  }
  const std::vector<std::string> lrs = LinesWith(log, ", lr = ");
  ASSERT_GE(lrs.size(), 4u);
  for (const std::string& l : lrs) {
    const std::vector<std::string> f = Fields(l);
    ASSERT_GE(f.size(), 9u) << l;
    EXPECT_TRUE(IsNumber(f[8])) << l;
    EXPECT_EQ(f[4], "Iteration") << l;
  }
  EXPECT_EQ(LinesWith(log, "] Solving ").size(), 1u) << "extract_seconds.py starts the clock there";

  // `hogstream test` as `caffe test`: "Batch i, NAME = v" per batch in name order, "Loss: L",
  // then "NAME = mean" with the loss suffix; L is the weighted sum of the means.
  const std::string net = dir / "net.prototxt";
  std::ofstream(net) << test::ThreeOutputNet();
  const test::Finished t = test::RunProgram(
      HS_HOGSTREAM_BIN,
      {"test", "--model=" + net, "--weights=" + (dir / "snap_iter_40.caffemodel"), "--iterations=3"},
      dir, 60);
  ASSERT_EQ(t.rc, 0) << t.err;
  const std::vector<std::string> batches = LinesWith(t.err, "] Batch ");
  ASSERT_EQ(batches.size(), 9u) << t.err;
  static const std::regex batch(R"(\] Batch (\d+), (\S+) = ([-+.\deE]+)$)");
  for (size_t i = 0; i < batches.size(); ++i) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(batches[i], m, batch)) << batches[i];
    EXPECT_EQ(std::stoul(m[1].str()), i / 3);
    EXPECT_EQ(m[2].str(), kSorted[i % 3]);
  }
  const std::vector<std::string> total = LinesWith(t.err, "] Loss: ");
  ASSERT_EQ(total.size(), 1u) << t.err;
  const double loss_total = std::stod(total[0].substr(total[0].find("] Loss: ") + 8));
  std::map<std::string, double> mean;
  std::istringstream in(t.err);
  bool after_loss = false;
  for (std::string line; std::getline(in, line);) {
    if (line.find("] Loss: ") != std::string::npos) {
      after_loss = true;
      continue;
    }
    if (!after_loss || line.find("] ") == std::string::npos) continue;
    const std::string rest = line.substr(line.find("] ") + 2);
    const std::string name = rest.substr(0, rest.find(' '));
    ASSERT_EQ(kSorted[mean.size()], name) << "final lines in name order: " << line;
    CheckValueLine(rest, name);
    mean[name] = std::stod(rest.substr(rest.find(" = ") + 3));
  }
  ASSERT_EQ(mean.size(), 3u) << t.err;
  // Each value under its own name: the weighted sum only adds up if aux's is aux's.
  EXPECT_NEAR(loss_total, mean["loss"] + 0.5 * mean["aux"], 1e-3 * std::max(1.0, loss_total));
  EXPECT_GT(std::fabs(mean["aux"] - mean["loss"]), 1e-3) << "the fixture's outputs must differ";
}

}  // namespace
}  // namespace hogstream
