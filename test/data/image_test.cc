// Image files in the data path: JPEG and PNG decoded and encoded (random pixels through PNG
// exactly, smooth ones through JPEG closely), Caffe's colour order and gray weights, the
// bilinear resize against its definition, `convert imageset` (raw, encoded as-is and
// re-encoded, gray, shuffled, the errors), encoded LMDBs read by the Data layer exactly as
// their raw twins, and the ImageData layer (order, resize, shuffle, disjoint partitions).
#include "data/image.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/context.hpp"
#include "core/layer.hpp"
#include "data/convert.hpp"
#include "data/lmdb.hpp"
#include "test/data/data_test_util.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using test::ErrorOf;
using test::TempDir;

Image RandomImage(int h, int w, int c, std::mt19937& gen) {
  Image img{h, w, c, std::vector<uint8_t>(static_cast<size_t>(h) * w * c)};
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& p : img.pixels) p = static_cast<uint8_t>(byte(gen));
  return img;
}

// A smooth image (gradients and a random offset per channel): JPEG keeps it within a few levels.
Image SmoothImage(int h, int w, std::mt19937& gen) {
  Image img{h, w, 3, std::vector<uint8_t>(static_cast<size_t>(h) * w * 3)};
  std::uniform_int_distribution<int> base(20, 120);
  const int b[3] = {base(gen), base(gen), base(gen)};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) img.pixels[(y * w + x) * 3 + c] = static_cast<uint8_t>(b[c] + (c + 1) * (x + y) * 60 / (h + w));
  return img;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(Image, PngCarriesEveryPixelExactlyInBgrOrder) {
  std::mt19937 gen(::hogstream::TestSeed());
  for (int c : {1, 3}) {
    const Image in = RandomImage(7, 5, c, gen);
    const std::string png = EncodeImage(in, "png");
    EXPECT_TRUE(IsImageFile(png));
    const Image out = DecodeImage(png, ColorMode::kNative, "t");
    ASSERT_EQ(out.channels, c);
    ASSERT_EQ(out.height, 7);
    ASSERT_EQ(out.width, 5);
    EXPECT_EQ(out.pixels, in.pixels);
  }
  // Colour to gray by OpenCV's weights; gray to colour by copying.
  const Image color = RandomImage(4, 6, 3, gen);
  const Image gray = DecodeImage(EncodeImage(color, "png"), ColorMode::kGray, "t");
  ASSERT_EQ(gray.channels, 1);
  for (size_t i = 0; i < gray.pixels.size(); ++i) {
    const double y = 0.114 * color.pixels[3 * i] + 0.587 * color.pixels[3 * i + 1] + 0.299 * color.pixels[3 * i + 2];
    EXPECT_NEAR(gray.pixels[i], y, 0.51) << i;
  }
  const Image back = DecodeImage(EncodeImage(gray, "png"), ColorMode::kColor, "t");
  ASSERT_EQ(back.channels, 3);
  for (size_t i = 0; i < gray.pixels.size(); ++i)
    for (int k = 0; k < 3; ++k) EXPECT_EQ(back.pixels[3 * i + k], gray.pixels[i]);
  // A Datum is channel-major with channel 0 the first stored (blue).
  pb::Datum d;
  ImageToDatum(color, 7, &d);
  EXPECT_EQ(d.channels(), 3);
  EXPECT_EQ(d.label(), 7);
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < 24; ++i) ASSERT_EQ(static_cast<uint8_t>(d.data()[k * 24 + i]), color.pixels[3 * i + k]);
}

TEST(Image, JpegKeepsASmoothImageWithinAFewLevels) {
  std::mt19937 gen(::hogstream::TestSeed());
  const Image in = SmoothImage(24, 32, gen);
  const std::string jpg = EncodeImage(in, "jpg");
  EXPECT_TRUE(IsImageFile(jpg));
  const Image out = DecodeImage(jpg, ColorMode::kNative, "t");
  ASSERT_EQ(out.channels, 3);
  ASSERT_EQ(out.height, 24);
  ASSERT_EQ(out.width, 32);
  double err = 0;
  for (size_t i = 0; i < in.pixels.size(); ++i) err += std::abs(int{in.pixels[i]} - int{out.pixels[i]});
  // Quality 95 with 4:2:0 chroma leaves 1.5-3.1 levels on these gradients (60 seeds); swapped
  // channels or a wrong colour space leave tens.
  EXPECT_LT(err / in.pixels.size(), 6.0) << "channels swapped or badly coded";
  const Image gray = DecodeImage(jpg, ColorMode::kGray, "t");
  EXPECT_EQ(gray.channels, 1);
}

// A JPEG that another encoder wrote (Pillow, quality 95, no chroma subsampling): 16 x 8, the
// left half RGB (220, 30, 40), the right half RGB (20, 60, 200). Decoded, its pixels come in
// Caffe's (OpenCV's) order, blue first; and what our encoder writes decodes back in that order,
// so neither side can swap red and blue unseen (a round trip through our own pair could).
const char kForeignJpegHex[] =
    "ffd8ffe000104a46494600010100000100010000ffdb0043000201010101010201010102020202020403020202020504"
    "040304060506060605060606070908060709070606080b08090a0a0a0a0a06080b0c0b0a0c090a0a0affdb0043010202"
    "02020202050303050a0706070a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a"
    "0a0a0a0a0a0a0a0a0a0a0a0a0a0affc00011080008001003011100021101031101ffc4001f0000010501010101010100"
    "000000000000000102030405060708090a0bffc400b5100002010303020403050504040000017d010203000411051221"
    "31410613516107227114328191a1082342b1c11552d1f02433627282090a161718191a25262728292a3435363738393a"
    "434445464748494a535455565758595a636465666768696a737475767778797a838485868788898a9293949596979899"
    "9aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1"
    "f2f3f4f5f6f7f8f9faffc4001f0100030101010101010101010000000000000102030405060708090a0bffc400b51100"
    "020102040403040705040400010277000102031104052131061241510761711322328108144291a1b1c109233352f015"
    "6272d10a162434e125f11718191a262728292a35363738393a434445464748494a535455565758595a63646566676869"
    "6a737475767778797a82838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4"
    "c5c6c7c8c9cad2d3d4d5d6d7d8d9dae2e3e4e5e6e7e8e9eaf2f3f4f5f6f7f8f9faffda000c03010002110311003f00f9"
    "7ebf133fd783c7ebfda03fc0b3ffd9";

TEST(Image, JpegPixelsComeInBgrOrder) {
  std::string jpg;
  for (size_t i = 0; i + 1 < sizeof kForeignJpegHex; i += 2)
    jpg.push_back(static_cast<char>(std::stoi(std::string(kForeignJpegHex + i, 2), nullptr, 16)));
  const Image img = DecodeImage(jpg, ColorMode::kNative, "foreign.jpg");
  ASSERT_EQ(img.channels, 3);
  ASSERT_EQ(img.height, 8);
  ASSERT_EQ(img.width, 16);
  auto px = [&](const Image& im, int y, int x, int c) { return int{im.pixels[(y * im.width + x) * 3 + c]}; };
  for (int y = 0; y < 8; ++y)
    for (int x : {1, 6, 9, 14}) {
      const int want[3] = {x < 8 ? 40 : 200, x < 8 ? 30 : 60, x < 8 ? 220 : 20};  // B, G, R
      for (int c = 0; c < 3; ++c) EXPECT_NEAR(px(img, y, x, c), want[c], 4) << y << "," << x << " channel " << c;
    }
  const Image again = DecodeImage(EncodeImage(img, "jpg"), ColorMode::kNative, "t");
  for (int y = 0; y < 8; ++y)
    for (int x : {1, 14})
      for (int c = 0; c < 3; ++c) EXPECT_NEAR(px(again, y, x, c), px(img, y, x, c), 8) << y << "," << x << " channel " << c;
}

TEST(Image, ResizeIsBilinearWithCentresAligned) {
  std::mt19937 gen(::hogstream::TestSeed());
  const Image in = RandomImage(5, 7, 3, gen);
  for (const auto& [h, w] : std::vector<std::pair<int, int>>{{10, 14}, {3, 4}, {5, 9}, {1, 1}}) {
    const Image out = ResizeImage(in, h, w);
    ASSERT_EQ(out.height, h);
    ASSERT_EQ(out.width, w);
    auto src = [](int i, int out_n, int in_n, int* k, double* f) {
      double x = (i + 0.5) * in_n / out_n - 0.5;
      *k = static_cast<int>(std::floor(x));
      *f = x - *k;
      if (*k < 0) *k = 0, *f = 0;
      if (*k >= in_n - 1) *k = in_n - 1, *f = 0;
    };
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        int ky, kx;
        double fy, fx;
        src(y, h, 5, &ky, &fy);
        src(x, w, 7, &kx, &fx);
        for (int c = 0; c < 3; ++c) {
          auto at = [&](int r, int q) { return static_cast<double>(in.pixels[(std::min(r, 4) * 7 + std::min(q, 6)) * 3 + c]); };
          const double v = (1 - fy) * ((1 - fx) * at(ky, kx) + fx * at(ky, kx + 1)) +
                           fy * ((1 - fx) * at(ky + 1, kx) + fx * at(ky + 1, kx + 1));
          ASSERT_NEAR(out.pixels[(y * w + x) * 3 + c], v, 0.51) << h << "x" << w << " at " << y << "," << x;
        }
      }
  }
  EXPECT_EQ(ResizeImage(in, 5, 7).pixels, in.pixels);
}

TEST(Image, WhatIsNoImageIsOneLine) {
  std::mt19937 gen(3);
  std::string e = ErrorOf([&] { DecodeImage("hello world", ColorMode::kNative, "f.txt"); });
  EXPECT_NE(e.find("f.txt: neither a JPEG nor a PNG file"), std::string::npos) << e;
  const std::string png = EncodeImage(RandomImage(8, 8, 3, gen), "png");
  e = ErrorOf([&] { DecodeImage(png.substr(0, png.size() / 2), ColorMode::kNative, "half.png"); });
  EXPECT_NE(e.find("half.png: not a readable PNG"), std::string::npos) << e;
  e = ErrorOf([&] { DecodeImage(std::string("\xFF\xD8\xFF", 3) + "garbage!", ColorMode::kNative, "bad.jpg"); });
  EXPECT_NE(e.find("bad.jpg: not a readable JPEG"), std::string::npos) << e;
  e = ErrorOf([&] { EncodeImage(RandomImage(2, 2, 3, gen), "gif"); });
  EXPECT_NE(e.find("unknown encode type 'gif'"), std::string::npos) << e;
}

// A folder of n PNG images (label i % 3, pixels random) listed in dir/list.txt; one path holds a
// space and one lies in a subfolder. Returns the images in list order.
std::vector<Image> WriteImageset(const TempDir& dir, int n, std::mt19937& gen, int h = 6, int w = 5) {
  std::ofstream list(dir / "list.txt");
  std::vector<Image> images;
  for (int i = 0; i < n; ++i) {
    images.push_back(RandomImage(h, w, 3, gen));
    const std::string name = i == 1 ? "sub/img 1.png" : "img" + std::to_string(i) + ".png";
    WriteFile(dir / ("images/" + name), EncodeImage(images.back(), "png"));
    list << name << " " << i % 3 << "\n";
  }
  return images;
}

std::vector<std::pair<std::string, pb::Datum>> ReadAll(const std::string& path) {
  LmdbCursor c(path);
  std::vector<std::pair<std::string, pb::Datum>> out;
  for (size_t i = 0; i < c.size(); ++i, c.Next()) {
    pb::Datum d;
    EXPECT_TRUE(d.ParseFromArray(c.value().data(), static_cast<int>(c.value().size())));
    out.emplace_back(std::string(c.key()), d);
  }
  return out;
}

TEST(ConvertImageset, WritesCaffesKeysAndDatums) {
  std::mt19937 gen(::hogstream::TestSeed());
  TempDir dir;
  const std::vector<Image> images = WriteImageset(dir, 5, gen);
  ASSERT_EQ(ConvertImageset(dir / "images", dir / "list.txt", dir / "raw", {}), 5u);
  auto raw = ReadAll(dir / "raw");
  ASSERT_EQ(raw.size(), 5u);
  EXPECT_EQ(raw[1].first, "00000001_sub/img 1.png");
  for (int i = 0; i < 5; ++i) {
    pb::Datum want;
    ImageToDatum(images[i], i % 3, &want);
    EXPECT_EQ(raw[i].second.SerializeAsString(), want.SerializeAsString()) << i;
  }
  // Encoded, nothing to change: the files' own bytes.
  ImagesetOptions o;
  o.encoded = true;
  ConvertImageset(dir / "images", dir / "list.txt", dir / "enc", o);
  auto enc = ReadAll(dir / "enc");
  std::ifstream f(dir / "images/img3.png", std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(enc[3].second.encoded());
  EXPECT_EQ(enc[3].second.data(), file);
  // Resized, gray, re-encoded as JPEG; shuffled by a seed.
  o.resize_height = 4;
  o.resize_width = 8;
  o.gray = true;
  o.encode_type = "jpg";
  o.shuffle = true;
  o.seed = 5;
  ConvertImageset(dir / "images", dir / "list.txt", dir / "small", o);
  auto small = ReadAll(dir / "small");
  std::set<std::string> names;
  for (auto& [key, d] : small) {
    names.insert(key.substr(9));
    DecodeDatum(&d, ColorMode::kNative, key);
    EXPECT_EQ(d.channels(), 1);
    EXPECT_EQ(d.height(), 4);
    EXPECT_EQ(d.width(), 8);
  }
  EXPECT_EQ(names.size(), 5u);
  // The mean of an encoded LMDB is the mean of its images.
  ASSERT_EQ(ComputeMean(dir / "enc", dir / "mean.binaryproto"), 5u);
}

TEST(ConvertImageset, ABadImageOrListLineFailsAndKeepsNothing) {
  std::mt19937 gen(4);
  TempDir dir;
  WriteImageset(dir, 3, gen);
  WriteFile(dir / "images/img2.png", "not an image");
  std::string e = ErrorOf([&] { ConvertImageset(dir / "images", dir / "list.txt", dir / "out", {}); });
  EXPECT_NE(e.find("img2.png (" + dir / "list.txt" + ":3): neither a JPEG nor a PNG"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
  std::ofstream(dir / "bad.txt") << "img0.png 1\nimg1.png\n";
  e = ErrorOf([&] { ConvertImageset(dir / "images", dir / "bad.txt", dir / "out", {}); });
  EXPECT_NE(e.find(dir / "bad.txt" + ":2: expected 'PATH LABEL'"), std::string::npos) << e;
  std::ofstream(dir / "missing.txt") << "nothere.png 1\n";
  e = ErrorOf([&] { ConvertImageset(dir / "images", dir / "missing.txt", dir / "out", {}); });
  EXPECT_NE(e.find("nothere.png"), std::string::npos) << e;
  EXPECT_NE(e.find("missing.txt:1"), std::string::npos) << e;
  // Sizes that differ, with --check_size.
  WriteFile(dir / "images/big.png", EncodeImage(RandomImage(9, 9, 3, gen), "png"));
  std::ofstream(dir / "mixed.txt") << "img0.png 0\nbig.png 1\n";
  ImagesetOptions o;
  o.check_size = true;
  e = ErrorOf([&] { ConvertImageset(dir / "images", dir / "mixed.txt", dir / "out", o); });
  EXPECT_NE(e.find("but the first image is 5x6 (--check_size)"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
}

struct Tops {
  Blob data, label;
  Blobs all() { return {&data, &label}; }
};

// The Data layer decodes encoded records on its readers: the same batches as the raw LMDB.
TEST(DataLayerImages, EncodedRecordsReadAsTheirRawTwins) {
  std::mt19937 gen(::hogstream::TestSeed());
  TempDir dir;
  WriteImageset(dir, 6, gen);
  ConvertImageset(dir / "images", dir / "list.txt", dir / "raw", {});
  ImagesetOptions o;
  o.encoded = true;
  ConvertImageset(dir / "images", dir / "list.txt", dir / "enc", o);
  Tops a, b;
  auto raw = CreateLayer(test::DataParam({dir / "raw"}, 4));
  auto enc = CreateLayer(test::DataParam({dir / "enc"}, 4));
  raw->SetUp({}, a.all());
  enc->SetUp({}, b.all());
  ASSERT_EQ(b.data.shape(), (std::vector<int>{4, 3, 6, 5}));
  for (int pass = 0; pass < 3; ++pass) {
    raw->Forward({}, a.all());
    enc->Forward({}, b.all());
    for (int i = 0; i < a.data.count(); ++i) ASSERT_EQ(a.data.cpu_data()[i], b.data.cpu_data()[i]) << pass;
    for (int i = 0; i < 4; ++i) ASSERT_EQ(a.label.cpu_data()[i], b.label.cpu_data()[i]);
  }
  pb::LayerParameter p = test::DataParam({dir / "enc"}, 2);
  p.mutable_transform_param()->set_force_gray(true);
  Tops g;
  auto gray = CreateLayer(p);
  gray->SetUp({}, g.all());
  EXPECT_EQ(g.data.shape(), (std::vector<int>{2, 1, 6, 5}));
}

pb::LayerParameter ImageDataParam(const std::string& list, const std::string& root, int batch,
                                  pb::Phase phase = pb::TEST) {
  pb::LayerParameter p;
  p.set_name("images");
  p.set_type("ImageData");
  p.set_phase(phase);
  p.add_top("data");
  p.add_top("label");
  p.mutable_image_data_param()->set_source(list);
  p.mutable_image_data_param()->set_root_folder(root);
  p.mutable_image_data_param()->set_batch_size(batch);
  return p;
}

TEST(ImageDataLayer, ReadsTheListInOrderResizedAndShuffled) {
  std::mt19937 gen(::hogstream::TestSeed());
  TempDir dir;
  const std::vector<Image> images = WriteImageset(dir, 5, gen);
  Tops t;
  auto layer = CreateLayer(ImageDataParam(dir / "list.txt", dir / "images", 3));
  layer->SetUp({}, t.all());
  ASSERT_EQ(t.data.shape(), (std::vector<int>{3, 3, 6, 5}));
  for (int batch = 0; batch < 2; ++batch) {
    layer->Forward({}, t.all());
    for (int i = 0; i < 3; ++i) {
      const int k = (batch * 3 + i) % 5;
      pb::Datum want;
      ImageToDatum(images[k], k % 3, &want);
      EXPECT_EQ(t.label.cpu_data()[i], k % 3);
      for (int j = 0; j < 90; ++j)
        ASSERT_EQ(t.data.cpu_data()[i * 90 + j], static_cast<uint8_t>(want.data()[j])) << k;
    }
  }
  pb::LayerParameter p = ImageDataParam(dir / "list.txt", dir / "images", 2);
  p.mutable_image_data_param()->set_new_height(3);
  p.mutable_image_data_param()->set_new_width(4);
  p.mutable_image_data_param()->set_is_color(false);
  auto small = CreateLayer(p);
  small->SetUp({}, t.all());
  EXPECT_EQ(t.data.shape(), (std::vector<int>{2, 1, 3, 4}));
  // Shuffled: every image once per pass, in one order for every reader of the list.
  p = ImageDataParam(dir / "list.txt", dir / "images", 5);
  p.mutable_image_data_param()->set_shuffle(true);
  Tops u, v;
  auto one = CreateLayer(p), two = CreateLayer(p);
  one->SetUp({}, u.all());
  two->SetUp({}, v.all());
  std::vector<int> first;
  for (int pass = 0; pass < 2; ++pass) {
    one->Forward({}, u.all());
    two->Forward({}, v.all());
    std::multiset<float> labels(u.label.cpu_data(), u.label.cpu_data() + 5);
    EXPECT_EQ(labels, (std::multiset<float>{0, 0, 1, 1, 2}));
    for (int i = 0; i < u.data.count(); ++i) ASSERT_EQ(u.data.cpu_data()[i], v.data.cpu_data()[i]);
  }
}

TEST(ImageDataLayer, PartitionsOfAShuffledListAreDisjoint) {
  std::mt19937 gen(::hogstream::TestSeed());
  TempDir dir;
  std::ofstream list(dir / "list.txt");
  for (int i = 0; i < 8; ++i) {  // label = index: each image named by its label
    WriteFile(dir / ("images/" + std::to_string(i) + ".png"), EncodeImage(RandomImage(2, 2, 1, gen), "png"));
    list << i << ".png " << i << "\n";
  }
  list.close();
  std::map<int, int> reads;
  for (int part = 0; part < 2; ++part) {
    Context ctx(Mode::CPU, 0, 1);
    ContextScope scope(&ctx);
    ctx.set_data_partition(part * 0.5, 0.5);
    pb::LayerParameter p = ImageDataParam(dir / "list.txt", dir / "images", 4, pb::TRAIN);
    p.mutable_image_data_param()->set_shuffle(true);
    Tops t;
    auto layer = CreateLayer(p);
    layer->SetUp({}, t.all());
    layer->Forward({}, t.all());
    for (int i = 0; i < 4; ++i) ++reads[static_cast<int>(t.label.cpu_data()[i])];
  }
  ASSERT_EQ(reads.size(), 8u) << "two halves of one pass read every image once";
  for (auto& [label, n] : reads) EXPECT_EQ(n, 1) << label;
}

TEST(ImageDataLayer, ErrorsNameTheListAndTheImage) {
  std::mt19937 gen(6);
  TempDir dir;
  WriteImageset(dir, 2, gen);
  Tops t;
  std::string e = ErrorOf([&] { CreateLayer(ImageDataParam(dir / "nolist.txt", "", 1))->SetUp({}, t.all()); });
  EXPECT_NE(e.find("cannot open image list"), std::string::npos) << e;
  WriteFile(dir / "images/img0.png", "junk");
  e = ErrorOf([&] { CreateLayer(ImageDataParam(dir / "list.txt", dir / "images", 1))->SetUp({}, t.all()); });
  EXPECT_NE(e.find("source '" + dir / "list.txt" + "', image 'img0.png'"), std::string::npos) << e;
  EXPECT_NE(e.find("neither a JPEG nor a PNG"), std::string::npos) << e;
  pb::LayerParameter p = ImageDataParam(dir / "list.txt", dir / "images", 1);
  p.mutable_image_data_param()->set_new_height(3);
  e = ErrorOf([&] { CreateLayer(p)->SetUp({}, t.all()); });
  EXPECT_NE(e.find("give new_height and new_width together"), std::string::npos) << e;
}

// ---------------------------------------------------------------- WindowData

// An image whose blue is 8 x (column), green 8 x (row), red `tag`: a crop says where it came from.
Image Coordinates(int h, int w, uint8_t tag) {
  Image img{h, w, 3, std::vector<uint8_t>(static_cast<size_t>(h) * w * 3)};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &img.pixels[(y * w + x) * 3];
      p[0] = static_cast<uint8_t>(8 * x);
      p[1] = static_cast<uint8_t>(8 * y);
      p[2] = tag;
    }
  return img;
}

pb::LayerParameter WindowParam(const std::string& file, const std::string& root, int pad) {
  pb::LayerParameter p;
  p.set_name("windows");
  p.set_type("WindowData");
  p.set_phase(pb::TEST);
  p.add_top("data");
  p.add_top("label");
  auto* w = p.mutable_window_data_param();
  w->set_source(file);
  w->set_root_folder(root);
  w->set_batch_size(4);
  w->set_crop_size(8);
  w->set_context_pad(pad);
  w->set_fg_fraction(0.5f);
  return p;
}

TEST(WindowDataLayer, DrawsForegroundAndBackgroundWindowsCutToSize) {
  TempDir dir;
  WriteFile(dir / "img/a.png", EncodeImage(Coordinates(20, 30, 100), "png"));
  WriteFile(dir / "img/b.png", EncodeImage(Coordinates(16, 16, 200), "png"));
  std::ofstream(dir / "windows.txt") << "# 0\na.png\n3\n20\n30\n3\n"
                                        "3 0.9 2 3 9 12\n"   // foreground, class 3
                                        "5 0.3 1 1 4 4\n"    // neither: unused
                                        "2 0.1 0 0 7 7\n"    // background
                                        "# 1\nb.png\n3\n16\n16\n1\n"
                                        "1 0.7 0 0 7 7\n";   // foreground, class 1
  Blob data, label;
  pb::LayerParameter p = WindowParam(dir / "windows.txt", dir / "img", 0);
  p.mutable_window_data_param()->set_bg_threshold(0.2f);  // 0.3 is then neither
  auto layer = CreateLayer(p);
  layer->SetUp({}, {&data, &label});
  ASSERT_EQ(data.shape(), (std::vector<int>{4, 3, 8, 8}));
  std::set<int> fg_labels;
  for (int batch = 0; batch < 20; ++batch) {
    layer->Forward({}, {&data, &label});
    for (int i = 0; i < 4; ++i) {
      const float* crop = data.cpu_data() + i * 192;
      const int l = static_cast<int>(label.cpu_data()[i]);
      if (i < 2) {  // the first half of every batch is foreground
        ASSERT_TRUE(l == 3 || l == 1) << l;
        fg_labels.insert(l);
        // Class 3 is columns 2..9 of image a (8 wide: no horizontal warp), class 1 image b.
        EXPECT_EQ(crop[128], l == 3 ? 100.f : 200.f) << "red tells the image";
        for (int j = 0; j < 8; ++j) EXPECT_EQ(crop[j], 8.f * ((l == 3 ? 2 : 0) + j)) << "blue is 8 x column";
      } else {
        ASSERT_EQ(l, 0) << "background";
        EXPECT_EQ(crop[128], 100.f);
        for (int j = 0; j < 8; ++j) EXPECT_EQ(crop[j], 8.f * j);
      }
    }
  }
  EXPECT_EQ(fg_labels, (std::set<int>{1, 3})) << "both foreground windows drawn in 40 tries";
  // Context: the box at the corner grown by 8 / (8 - 2 * 2): what lies beyond the image is black.
  std::ofstream(dir / "corner.txt") << "# 0\na.png\n3\n20\n30\n2\n1 0.9 0 0 3 3\n0 0.0 10 10 13 13\n";
  auto corner = CreateLayer(WindowParam(dir / "corner.txt", dir / "img", 2));
  corner->SetUp({}, {&data, &label});
  corner->Forward({}, {&data, &label});
  ASSERT_EQ(label.cpu_data()[0], 1);
  // The grown box is x, y in [-2, 6]: rows and columns 0-1 of the crop lie outside the image.
  const float* red = data.cpu_data() + 2 * 64;
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x)
      EXPECT_EQ(red[y * 8 + x], x < 2 || y < 2 ? 0.f : 100.f) << "at " << y << "," << x;
}

TEST(WindowDataLayer, MalformedFilesAreOneLine) {
  TempDir dir;
  Blob data, label;
  std::ofstream(dir / "bad.txt") << "# 0\na.png\n3\n20\n30\n1\n3 0.9 2 3\n";
  std::string e = ErrorOf([&] { CreateLayer(WindowParam(dir / "bad.txt", dir / "", 0))->SetUp({}, {&data, &label}); });
  EXPECT_NE(e.find(dir / "bad.txt" + ":7: expected CLASS OVERLAP X1 Y1 X2 Y2"), std::string::npos) << e;
  std::ofstream(dir / "nobg.txt") << "# 0\na.png\n3\n20\n30\n1\n3 0.9 2 3 9 12\n";
  e = ErrorOf([&] { CreateLayer(WindowParam(dir / "nobg.txt", dir / "", 0))->SetUp({}, {&data, &label}); });
  EXPECT_NE(e.find("has no background window"), std::string::npos) << e;
  pb::LayerParameter p = WindowParam(dir / "nobg.txt", dir / "", 0);
  p.mutable_window_data_param()->set_crop_mode("stretch");
  e = ErrorOf([&] { CreateLayer(p)->SetUp({}, {&data, &label}); });
  EXPECT_NE(e.find("crop_mode must be warp or square"), std::string::npos) << e;
}

}  // namespace
}  // namespace hogstream
