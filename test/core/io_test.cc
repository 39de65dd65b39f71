#include "core/io.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/blob.hpp"

namespace hogstream {
namespace {

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

}  // namespace
}  // namespace hogstream
