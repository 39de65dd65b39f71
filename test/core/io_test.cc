#include "core/io.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/blob.hpp"
#include "test/data/data_test_util.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

namespace fs = std::filesystem;

TEST(IO, MissingFileNamesThePath) {
  try {
    ReadNetText("/nonexistent/net.prototxt");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/net.prototxt"), std::string::npos);
  }
}

TEST(IO, BinaryRoundTripIsAtomicAndTruncationIsDetected) {
  const fs::path dir = fs::temp_directory_path() / ("hs_io_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "w.caffemodel").string();
  pb::NetParameter net;
  net.set_name("n");
  auto* l = net.add_layer();
  l->set_name("ip");
  l->set_type("InnerProduct");
  Blob b(std::vector<int>{3, 70});
  for (int i = 0; i < b.count(); ++i) b.mutable_cpu_data()[i] = 0.5f * i - 3;
  b.ToProto(l->add_blobs());
  WriteBinaryProtoAtomic(path, net);
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename(), "w.caffemodel") << "temporary file left behind";
  pb::NetParameter back;
  ReadBinaryProto(path, &back);
  ASSERT_EQ(back.layer_size(), 1);
  Blob c;
  c.FromProto(back.layer(0).blobs(0));
  EXPECT_EQ(c.shape(), b.shape());
  for (int i = 0; i < b.count(); ++i) EXPECT_EQ(c.cpu_data()[i], b.cpu_data()[i]);
  // Cut the file short: a clear error, not garbage weights.
  fs::resize_file(path, fs::file_size(path) - 7);
  pb::NetParameter cut;
  EXPECT_THROW(ReadBinaryProto(path, &cut), Error);
  fs::remove_all(dir);
}

TEST(IO, LegacyBlobShapeIsRead) {
  pb::BlobProto p;
  p.set_num(1);
  p.set_channels(2);
  p.set_height(1);
  p.set_width(3);
  for (int i = 0; i < 6; ++i) p.add_data(static_cast<float>(i));
  Blob b;
  b.FromProto(p);
  EXPECT_EQ(b.shape(), (std::vector<int>{1, 2, 1, 3}));
  Blob fixed(std::vector<int>{2, 3});
  // Legacy 1x2x1x3 does not equal 2x3 under 4-d padding (1x1x2x3): a clear error.
  EXPECT_THROW(fixed.FromProto(p, false), Error);
}


using ScratchDir = test::TempDir;
using test::ErrorOf;

// A directory once read as an empty file: --model=DIR exited 0 and --weights=DIR trained
// from random weights.
TEST(IO, DirectoriesAreRefused) {
  ScratchDir dir;
  const std::string d = dir / "sub";
  fs::create_directories(d);
  for (const std::string& e : {ErrorOf([&] { ReadNetText(d); }),
                               ErrorOf([&] { ReadSolverText(d); }),
                               ErrorOf([&] {
                                 pb::NetParameter n;
                                 ReadBinaryProto(d, &n);
                               }),
                               ErrorOf([&] {
                                 pb::NetParameter n;
                                 ReadTextProto(d, &n);
                               })}) {
    EXPECT_NE(e.find(d + " is a directory"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

// A write killed mid-way left NAME.tmp.PID behind forever; the next write of NAME removes
// those whose process is gone, and keeps those of live processes.
TEST(IO, StaleTemporaryFilesAreRemoved) {
  ScratchDir dir;
  const std::string path = dir / "w.caffemodel";
  // Above /proc/sys/kernel/pid_max, so no such process can exist.
  long pid_max = 4194304;
  std::ifstream("/proc/sys/kernel/pid_max") >> pid_max;
  const std::string dead = path + ".tmp." + std::to_string(pid_max + 1);
  const std::string live = path + ".tmp." + std::to_string(::getpid()) + ".777";
  const std::string other = dir / "x.caffemodel.tmp." + std::to_string(pid_max + 1);
  for (const auto& f : {dead, live, other}) std::ofstream(f) << "partial";
  pb::NetParameter net;
  net.set_name("n");
  WriteBinaryProtoAtomic(path, net);
  EXPECT_FALSE(fs::exists(dead)) << "stale temporary file kept";
  EXPECT_TRUE(fs::exists(live)) << "a live process's temporary file was removed";
  EXPECT_TRUE(fs::exists(other)) << "another file's temporary was removed";
  pb::NetParameter back;
  ReadBinaryProto(path, &back);
  EXPECT_EQ(back.name(), "n");
}

}  // namespace
}  // namespace hogstream
