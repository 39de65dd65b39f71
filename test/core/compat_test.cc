// Every net prototxt of the Caffe compatibility corpus (../shared/compat/caffe) parses and
// builds, and our own configs/ always do (nets with their parameter counts, solvers with
// their net files). The corpus is absent on a user's machine: those tests skip with a
// message there.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/io.hpp"
#include "core/net.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

namespace fs = std::filesystem;

const fs::path kCompat = fs::path(HS_SOURCE_DIR) / ".." / "shared" / "compat" / "caffe";

struct NetCase {
  const char* path;
  std::vector<int> input;      // stand-in for the Data layer's "data" top
  long expected_params;        // -1: not pinned
};

std::ostream& operator<<(std::ostream& os, const NetCase& c) { return os << c.path; }

size_t Build(const fs::path& file, const std::vector<int>& input, pb::Phase phase,
             std::vector<std::string> stages = {}) {
  NetOptions o;
  o.phase = phase;
  o.stages = std::move(stages);
  o.input_shapes["data"] = input;
  Net net(ReadNetText(file.string(), &o.source), o);
  EXPECT_GT(net.layers().size(), 1u);
  return net.num_learnable();
}

class CompatNets : public ::testing::TestWithParam<NetCase> {};

TEST_P(CompatNets, ParseAndBuildInBothPhases) {
  if (!fs::exists(kCompat)) GTEST_SKIP() << "Caffe compat corpus not found at " << kCompat;
  const NetCase c = GetParam();
  const fs::path file = kCompat / c.path;
  ASSERT_TRUE(fs::exists(file)) << file;
  std::vector<std::string> stages;
  if (std::string(c.path).find("autoencoder") != std::string::npos) stages = {"test-on-test"};
  const size_t train = Build(file, c.input, pb::TRAIN);
  const size_t test = Build(file, c.input, pb::TEST, stages);
  EXPECT_EQ(train, test);
  if (c.expected_params >= 0) {
    EXPECT_EQ(train, static_cast<size_t>(c.expected_params));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Caffe, CompatNets,
    ::testing::Values(
        NetCase{"examples/mnist/lenet_train_test.prototxt", {64, 1, 28, 28}, 431080},
        NetCase{"examples/mnist/mnist_autoencoder.prototxt", {100, 1, 28, 28}, -1},
        NetCase{"examples/cifar10/cifar10_quick_train_test.prototxt", {100, 3, 32, 32}, 145578},
        NetCase{"examples/cifar10/cifar10_full_train_test.prototxt", {100, 3, 32, 32}, 89578},
        NetCase{"models/bvlc_reference_caffenet/train_val.prototxt", {2, 3, 227, 227}, 60965224},
        NetCase{"models/bvlc_alexnet/train_val.prototxt", {2, 3, 227, 227}, 60965224},
        NetCase{"models/bvlc_googlenet/train_val.prototxt", {2, 3, 224, 224}, -1}));

TEST(CompatSolvers, EverySolverParses) {
  if (!fs::exists(kCompat)) GTEST_SKIP() << "Caffe compat corpus not found at " << kCompat;
  int n = 0;
  for (const auto& e : fs::recursive_directory_iterator(kCompat)) {
    const std::string name = e.path().filename().string();
    if (name.find("solver") == std::string::npos || e.path().extension() != ".prototxt") continue;
    EXPECT_NO_THROW(ReadSolverText(e.path().string())) << e.path();
    ++n;
  }
  EXPECT_GE(n, 5);
}

// Every .prototxt in the corpus that is a net (not a solver) parses.
TEST(CompatNetsAll, EveryNetFileParses) {
  if (!fs::exists(kCompat)) GTEST_SKIP() << "Caffe compat corpus not found at " << kCompat;
  int n = 0;
  for (const auto& e : fs::recursive_directory_iterator(kCompat)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".prototxt" || name.find("solver") != std::string::npos) continue;
    EXPECT_NO_THROW(ReadNetText(e.path().string())) << e.path();
    ++n;
  }
  EXPECT_GE(n, 7);
}

TEST(OwnConfigs, BuildWithExpectedParameterCounts) {
  const fs::path dir = fs::path(HS_SOURCE_DIR) / "configs";
  EXPECT_EQ(Build(dir / "lenet/lenet_train_test.prototxt", {64, 1, 28, 28}, pb::TRAIN), 431080u);
  EXPECT_EQ(Build(dir / "lenet/lenet_train_test.prototxt", {100, 1, 28, 28}, pb::TEST), 431080u);
  EXPECT_EQ(Build(dir / "cifar10/quick_train_test.prototxt", {100, 3, 32, 32}, pb::TRAIN), 145578u);
  EXPECT_EQ(Build(dir / "cifar10/full_train_test.prototxt", {100, 3, 32, 32}, pb::TEST), 89578u);
  // configs/make_nets.py's nets, both inputs, both phases; BatchNorm's statistics blobs count,
  // as in Caffe (bench/torch_nets.py's "caffe_params" for the same prototxts).
  // The first convolution has 16 (ResNet) or 32 (Inception) 3x3 filters per input channel.
  struct Input { const char* name; std::vector<int> shape; };
  for (const Input& in : {Input{"fmnist", {64, 1, 28, 28}}, Input{"cifar", {64, 3, 32, 32}}}) {
    const size_t extra = in.shape[1] - 1;
    const std::string resnet = std::string("resnet/resnet20_") + in.name + "_train_test.prototxt";
    const std::string inception =
        std::string("inception/inception_") + in.name + "_train_test.prototxt";
    for (pb::Phase phase : {pb::TRAIN, pb::TEST}) {
      EXPECT_EQ(Build(dir / resnet, in.shape, phase), 273775u + 16 * 9 * extra) << resnet;
      EXPECT_EQ(Build(dir / inception, in.shape, phase), 276010u + 32 * 9 * extra) << inception;
    }
  }
}

TEST(OwnConfigs, EverySolverParsesAndNamesAnExistingNet) {
  const fs::path root = fs::path(HS_SOURCE_DIR);
  int n = 0;
  for (const auto& e : fs::recursive_directory_iterator(root / "configs")) {
    if (e.path().filename().string().find("solver") == std::string::npos) continue;
    pb::SolverParameter s;
    ASSERT_NO_THROW(s = ReadSolverText(e.path().string())) << e.path();
    EXPECT_TRUE(fs::exists(root / s.net())) << e.path() << " names " << s.net();
    ++n;
  }
  EXPECT_GE(n, 7);
}

}  // namespace
}  // namespace hogstream
