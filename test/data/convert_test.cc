// Converters: MNIST IDX (plain and gzipped) and CIFAR-10 binaries round-tripped through LMDB
// and read back by the cursor and by the Data layer, pixel by pixel; the mean computation;
// and the errors for bad inputs, each naming the file.
#include "data/convert.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/io.hpp"
#include "core/layer.hpp"
#include "data/image.hpp"
#include "test/data/data_test_util.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using test::ErrorOf;
using test::Key8;
using test::TempDir;

std::string BigEndian(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Gzips `path` into path + ".gz" with the system's gzip.
std::string Gzip(const std::string& path) {
  EXPECT_EQ(std::system(("gzip -nc '" + path + "' > '" + path + ".gz'").c_str()), 0);
  return path + ".gz";
}

struct Mnist {
  std::string images_path, labels_path, pixels, labels;
  int rows, cols;
};

Mnist WriteMnist(const TempDir& dir, int n, int rows, int cols, std::mt19937& gen) {
  Mnist m{dir / "images.idx",
          dir / "labels.idx",
          test::RandomBytes(size_t(n) * rows * cols, gen),
          "",
          rows,
          cols};
  for (int i = 0; i < n; ++i) m.labels += static_cast<char>(gen() % 10);
  WriteFile(m.images_path,
            BigEndian(2051) + BigEndian(n) + BigEndian(rows) + BigEndian(cols) + m.pixels);
  WriteFile(m.labels_path, BigEndian(2049) + BigEndian(n) + m.labels);
  return m;
}

void ExpectMnistLmdb(const std::string& lmdb, const Mnist& m) {
  const size_t n = m.labels.size(), pixels = size_t(m.rows) * m.cols;
  LmdbCursor cursor(lmdb);
  ASSERT_EQ(cursor.size(), n);
  pb::Datum d;
  for (size_t i = 0; i < n; ++i, cursor.Next()) {
    ASSERT_EQ(cursor.key(), Key8(i));
    ASSERT_TRUE(d.ParseFromArray(cursor.value().data(), int(cursor.value().size())));
    ASSERT_EQ(d.channels(), 1);
    ASSERT_EQ(d.height(), m.rows);
    ASSERT_EQ(d.width(), m.cols);
    ASSERT_EQ(d.label(), static_cast<uint8_t>(m.labels[i]));
    ASSERT_EQ(d.data(), m.pixels.substr(i * pixels, pixels)) << "record " << i;
  }

  // Through the Data layer: record order, wrapping after the last record.
  const int batch = 10;
  auto layer = CreateLayer(test::DataParam({lmdb}, batch));
  Blob data, label;
  layer->SetUp({}, {&data, &label});
  ASSERT_EQ(data.shape(), (std::vector<int>{batch, 1, m.rows, m.cols}));
  ASSERT_EQ(label.shape(), std::vector<int>{batch});
  for (int b = 0, item = 0; b < 5; ++b) {
    layer->Forward({}, {&data, &label});
    for (int i = 0; i < batch; ++i, ++item) {
      const size_t r = item % n;
      ASSERT_EQ(label.cpu_data()[i], static_cast<uint8_t>(m.labels[r]));
      for (size_t p = 0; p < pixels; ++p)
        ASSERT_EQ(data.cpu_data()[i * pixels + p], static_cast<uint8_t>(m.pixels[r * pixels + p]))
            << "item " << item << " pixel " << p;
    }
  }
}

TEST(ConvertMnistTest, PlainRoundTrip) {
  TempDir dir;
  std::mt19937 gen(1);
  const Mnist m = WriteMnist(dir, 37, 28, 28, gen);
  EXPECT_EQ(ConvertMnist(m.images_path, m.labels_path, dir / "lmdb"), 37u);
  ExpectMnistLmdb(dir / "lmdb", m);
}

TEST(ConvertMnistTest, GzippedRoundTripTakesDimsFromHeader) {
  TempDir dir;
  std::mt19937 gen(2);
  const Mnist m = WriteMnist(dir, 23, 28, 20, gen);
  EXPECT_EQ(ConvertMnist(Gzip(m.images_path), Gzip(m.labels_path), dir / "lmdb"), 23u);
  ExpectMnistLmdb(dir / "lmdb", m);
}

TEST(ConvertMnistTest, BadInputsAreErrorsNamingTheFile) {
  TempDir dir;
  std::mt19937 gen(3);
  const Mnist m = WriteMnist(dir, 5, 28, 28, gen);
  const std::string out = dir / "lmdb";
  auto expect_error = [&](const std::string& images, const std::string& labels,
                          const std::string& names, const std::string& says) {
    const std::string e = ErrorOf([&] { ConvertMnist(images, labels, out); });
    EXPECT_NE(e.find(names), std::string::npos) << e;
    EXPECT_NE(e.find(says), std::string::npos) << e;
    EXPECT_FALSE(std::filesystem::exists(out)) << "inputs are checked before the output is made";
  };
  // Wrong magic: the files swapped.
  expect_error(m.labels_path, m.images_path, m.labels_path, "magic");
  // Truncated, plain and gzipped.
  const std::string all = BigEndian(2051) + BigEndian(5) + BigEndian(28) + BigEndian(28) + m.pixels;
  WriteFile(dir / "short.idx", all.substr(0, all.size() - 100));
  expect_error(dir / "short.idx", m.labels_path, dir / "short.idx", "truncated");
  std::ifstream gz_in(Gzip(m.images_path), std::ios::binary);
  const std::string gz((std::istreambuf_iterator<char>(gz_in)), {});
  WriteFile(dir / "short.idx.gz", gz.substr(0, gz.size() / 2));
  expect_error(dir / "short.idx.gz", m.labels_path, dir / "short.idx.gz", "");
  // Counts that disagree.
  WriteFile(dir / "labels4.idx", BigEndian(2049) + BigEndian(4) + m.labels.substr(0, 4));
  expect_error(m.images_path, dir / "labels4.idx", dir / "labels4.idx", "5 images");
  // Missing input, existing output.
  expect_error(dir / "none.idx", m.labels_path, dir / "none.idx", "cannot open");
  std::filesystem::create_directory(out);
  const std::string e = ErrorOf([&] { ConvertMnist(m.images_path, m.labels_path, out); });
  EXPECT_NE(e.find(out + " exists"), std::string::npos) << e;
}

// The real Fashion-MNIST test set, when the Debian package is installed.
TEST(ConvertMnistTest, FashionMnistTestSet) {
  const std::string root = "/usr/share/datasets/fashion-mnist/";
  if (!std::filesystem::exists(root + "t10k-images-idx3-ubyte.gz")) GTEST_SKIP() << "no " << root;
  TempDir dir;
  EXPECT_EQ(ConvertMnist(root + "t10k-images-idx3-ubyte.gz", root + "t10k-labels-idx1-ubyte.gz",
                         dir / "lmdb"),
            10000u);
  LmdbCursor cursor(dir / "lmdb");
  EXPECT_EQ(cursor.size(), 10000u);
  pb::Datum d;
  ASSERT_TRUE(d.ParseFromArray(cursor.value().data(), int(cursor.value().size())));
  EXPECT_EQ(d.data().size(), 784u);
  EXPECT_LT(d.label(), 10);
}

TEST(ConvertCifarTest, RoundTripKeysRunAcrossFiles) {
  TempDir dir;
  std::mt19937 gen(4);
  const std::string a = test::RandomBytes(3 * 3073, gen),
                    b = test::RandomBytes(4 * 3073, gen);
  WriteFile(dir / "a.bin", a);
  WriteFile(dir / "b.bin", b);
  EXPECT_EQ(ConvertCifar10({dir / "a.bin", dir / "b.bin"}, dir / "lmdb"), 7u);
  const std::string all = a + b;
  LmdbCursor cursor(dir / "lmdb");
  ASSERT_EQ(cursor.size(), 7u);
  pb::Datum d;
  for (int i = 0; i < 7; ++i, cursor.Next()) {
    char key[8];
    std::snprintf(key, sizeof key, "%05d", i);
    ASSERT_EQ(cursor.key(), key);
    ASSERT_TRUE(d.ParseFromArray(cursor.value().data(), int(cursor.value().size())));
    EXPECT_EQ(d.channels(), 3);
    EXPECT_EQ(d.height(), 32);
    EXPECT_EQ(d.width(), 32);
    EXPECT_EQ(d.label(), static_cast<uint8_t>(all[i * 3073]));
    EXPECT_EQ(d.data(), all.substr(i * 3073 + 1, 3072));
  }

  WriteFile(dir / "bad.bin", a.substr(0, 3073 + 10));
  const std::string e = ErrorOf([&] {
    ConvertCifar10({dir / "a.bin", dir / "bad.bin"}, dir / "x");
  });
  EXPECT_NE(e.find(dir / "bad.bin"), std::string::npos) << e;
}

// scripts/cifar10.sh rebuilds CIFAR-10's binary batches from PNG sprites (one 1 024-pixel RGB
// row per image) with scripts/cifar10_png.py: random sprites of 3 and 2 rows through the script
// and ConvertCifar10 come out as Datums whose planes are the rows' R, G and B values in order.
TEST(ConvertCifarTest, SpritesThroughScriptsCifar10Png) {
  if (std::system("/usr/bin/python3 -c 'import numpy, PIL' 2>/dev/null") != 0)
    GTEST_SKIP() << "no /usr/bin/python3 with numpy and PIL (apt-get install python3-numpy python3-pil)";
  TempDir dir;
  std::mt19937 gen(6);
  std::vector<Image> sprites;
  std::vector<int> classes{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};  // distinct labels: a shifted one shows
  std::shuffle(classes.begin(), classes.end(), gen);
  std::string labels = "[";
  int images = 0;
  for (int rows : {3, 2}) {
    Image sprite{rows, 1024, 3, {}};
    const std::string bytes = test::RandomBytes(size_t(rows) * 1024 * 3, gen);
    sprite.pixels.assign(bytes.begin(), bytes.end());
    WriteFile(dir / ("s" + std::to_string(sprites.size()) + ".png"), EncodeImage(sprite, "png"));
    sprites.push_back(sprite);
    for (int r = 0; r < rows; ++r, ++images)
      labels += (images ? "," : "") + std::to_string(classes[images]);
  }
  WriteFile(dir / "labels.json", labels + "]");
  const std::string script = std::string(HS_SOURCE_DIR) + "/scripts/cifar10_png.py";
  ASSERT_EQ(std::system(("/usr/bin/python3 '" + script + "' '" + (dir / "labels.json") + "' '" + (dir / "") +
                         "' '" + (dir / "s0.png") + ":a.bin' '" + (dir / "s1.png") + ":b.bin' >/dev/null")
                            .c_str()),
            0);
  EXPECT_EQ(ConvertCifar10({dir / "a.bin", dir / "b.bin"}, dir / "lmdb"), 5u);
  LmdbCursor cursor(dir / "lmdb");
  pb::Datum d;
  int image = 0;
  for (const Image& sprite : sprites) {
    for (int row = 0; row < sprite.height; ++row, ++image, cursor.Next()) {
      ASSERT_TRUE(d.ParseFromArray(cursor.value().data(), int(cursor.value().size())));
      EXPECT_EQ(d.label(), classes[image]) << "image " << image;
      ASSERT_EQ(d.data().size(), 3072u);
      // The sprite holds B, G, R per pixel (Image's order); the Datum R, G and B planes.
      for (int c = 0; c < 3; ++c)
        for (int p = 0; p < 1024; ++p)
          ASSERT_EQ(static_cast<uint8_t>(d.data()[c * 1024 + p]), sprite.pixels[(row * 1024 + p) * 3 + 2 - c])
              << "image " << image << ", channel " << c << ", pixel " << p;
    }
  }
  EXPECT_EQ(image, 5);

  // Labels that do not match the sprites' rows are one line and a failure.
  WriteFile(dir / "short.json", "[1,2]");
  EXPECT_NE(std::system(("/usr/bin/python3 '" + script + "' '" + (dir / "short.json") + "' '" + (dir / "") +
                         "' '" + (dir / "s0.png") + ":c.bin' 2>/dev/null")
                            .c_str()),
            0);
}

TEST(ComputeMeanTest, PerPixelMeanAndBadRecords) {
  TempDir dir;
  std::mt19937 gen(5);
  std::vector<pb::Datum> data;
  for (int i = 0; i < 5; ++i)
    data.push_back(test::MakeDatum(2, 3, 4, test::RandomBytes(24, gen), i));
  test::WriteLmdb(dir / "lmdb", data);
  EXPECT_EQ(ComputeMean(dir / "lmdb", dir / "mean.binaryproto"), 5u);
  pb::BlobProto mean;
  ReadBinaryProto(dir / "mean.binaryproto", &mean);
  EXPECT_EQ(mean.num(), 1);
  EXPECT_EQ(mean.channels(), 2);
  EXPECT_EQ(mean.height(), 3);
  EXPECT_EQ(mean.width(), 4);
  ASSERT_EQ(mean.data_size(), 24);
  for (int p = 0; p < 24; ++p) {
    double sum = 0;
    for (const auto& d : data) sum += static_cast<uint8_t>(d.data()[p]);
    EXPECT_FLOAT_EQ(mean.data(p), static_cast<float>(sum / 5));
  }

  data.push_back(test::MakeDatum(2, 3, 4, "short", 0));
  test::WriteLmdb(dir / "bad", data);
  const std::string e = ErrorOf([&] { ComputeMean(dir / "bad", dir / "m2.binaryproto"); });
  EXPECT_NE(e.find(dir / "bad"), std::string::npos) << e;
  EXPECT_NE(e.find("'00000005'"), std::string::npos) << e;
}

}  // namespace
}  // namespace hogstream
