// DataTransformer: scale and means against hand-computed values, Caffe's centre crop, random
// crops and mirrors checked against the source image, determinism, and bad Datums.
#include "data/transform.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include <set>
#include <tuple>

#include "core/io.hpp"
#include "test/data/data_test_util.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using test::ErrorOf;
using test::MakeDatum;
using test::TempDir;

std::vector<float> Apply(const DataTransformer& t, const pb::Datum& d, std::mt19937& rng) {
  const std::vector<int> s = t.OutputShape(d);
  std::vector<float> out(static_cast<size_t>(s[0]) * s[1] * s[2]);
  t.Transform(d, out.data(), rng);
  return out;
}

uint8_t Pixel(const pb::Datum& d, int c, int y, int x) {
  return static_cast<uint8_t>(d.data()[(c * d.height() + y) * d.width() + x]);
}

TEST(TransformTest, ScaleAndMeanValues) {
  std::mt19937 gen(1), rng(2);
  const pb::Datum d = MakeDatum(3, 4, 5, test::RandomBytes(60, gen), 7);
  pb::TransformationParameter p;
  p.set_scale(0.5f);
  std::vector<float> out = Apply(DataTransformer(p, pb::TRAIN), d, rng);
  for (int i = 0; i < 60; ++i) ASSERT_EQ(out[i], static_cast<uint8_t>(d.data()[i]) * 0.5f);

  p.add_mean_value(10.f);  // one value serves every channel
  out = Apply(DataTransformer(p, pb::TEST), d, rng);
  for (int i = 0; i < 60; ++i) ASSERT_EQ(out[i], (static_cast<uint8_t>(d.data()[i]) - 10.f) * 0.5f);

  p.add_mean_value(20.f);
  p.add_mean_value(30.f);  // one per channel
  out = Apply(DataTransformer(p, pb::TEST), d, rng);
  for (int i = 0; i < 60; ++i)
    ASSERT_EQ(out[i], (static_cast<uint8_t>(d.data()[i]) - 10.f * (1 + i / 20)) * 0.5f);

  p.add_mean_value(40.f);  // neither one nor one per channel
  const std::string e = ErrorOf([&] { DataTransformer(p, pb::TEST).OutputShape(d); });
  EXPECT_NE(e.find("mean_value"), std::string::npos) << e;
}

TEST(TransformTest, FloatData) {
  pb::Datum d;
  d.set_channels(1);
  d.set_height(2);
  d.set_width(2);
  for (float v : {1.5f, -2.f, 3.25f, 0.f}) d.add_float_data(v);
  pb::TransformationParameter p;
  p.set_scale(2.f);
  p.add_mean_value(1.f);
  std::mt19937 rng(0);
  EXPECT_EQ(Apply(DataTransformer(p, pb::TEST), d, rng),
            (std::vector<float>{1.f, -6.f, 4.5f, -2.f}));
}

TEST(TransformTest, MeanFile) {
  TempDir dir;
  std::mt19937 gen(3), rng(4);
  const pb::Datum d = MakeDatum(2, 3, 4, test::RandomBytes(24, gen), 0);
  pb::BlobProto mean;
  for (int dim : {1, 2, 3, 4}) mean.mutable_shape()->add_dim(dim);
  for (int i = 0; i < 24; ++i) mean.add_data(i * 0.25f);
  WriteBinaryProtoAtomic(dir / "mean.binaryproto", mean);
  pb::TransformationParameter p;
  p.set_mean_file(dir / "mean.binaryproto");
  p.set_scale(3.f);
  std::vector<float> out = Apply(DataTransformer(p, pb::TEST), d, rng);
  for (int i = 0; i < 24; ++i)
    ASSERT_FLOAT_EQ(out[i], (static_cast<uint8_t>(d.data()[i]) - i * 0.25f) * 3.f);

  // With a centre crop the mean is taken at the pixel's source position, as Caffe does.
  p.set_crop_size(2);
  out = Apply(DataTransformer(p, pb::TEST), d, rng);
  ASSERT_EQ(out.size(), 8u);
  for (int c = 0; c < 2; ++c)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 2; ++x) {
        const int src = (c * 3 + y) * 4 + 1 + x;  // offsets (3-2)/2 = 0 and (4-2)/2 = 1
        ASSERT_FLOAT_EQ(out[(c * 2 + y) * 2 + x],
                        (static_cast<uint8_t>(d.data()[src]) - src * 0.25f) * 3.f);
      }

  // A mean of another shape names the file; mean_file with mean_value is refused.
  const pb::Datum other = MakeDatum(2, 4, 3, test::RandomBytes(24, gen), 0);
  std::string e = ErrorOf([&] { DataTransformer(p, pb::TEST).OutputShape(other); });
  EXPECT_NE(e.find(dir / "mean.binaryproto"), std::string::npos) << e;
  p.add_mean_value(1.f);
  e = ErrorOf([&] { DataTransformer t(p, pb::TEST); });
  EXPECT_NE(e.find("not both"), std::string::npos) << e;
  // A mean that is not 1 x C x H x W.
  mean.mutable_shape()->set_dim(0, 2);
  WriteBinaryProtoAtomic(dir / "bad.binaryproto", mean);
  p.clear_mean_value();
  p.set_mean_file(dir / "bad.binaryproto");
  e = ErrorOf([&] { DataTransformer t(p, pb::TEST); });
  EXPECT_NE(e.find(dir / "bad.binaryproto"), std::string::npos) << e;
}

// Caffe's centre: offsets (H - crop) / 2 and (W - crop) / 2; with `mirror` the centre crop is
// flipped at random, in TEST too.
TEST(TransformTest, CentreCropInTest) {
  std::string pixels;
  for (int i = 0; i < 2 * 5 * 8; ++i) pixels += static_cast<char>(i);
  const pb::Datum d = MakeDatum(2, 5, 8, pixels, 0);
  pb::TransformationParameter p;
  p.set_crop_size(3);
  p.set_mirror(true);
  std::mt19937 rng(5);
  const DataTransformer t(p, pb::TEST);
  EXPECT_EQ(t.OutputShape(d), (std::vector<int>{2, 3, 3}));
  std::vector<float> want;
  for (int c = 0; c < 2; ++c)
    for (int y = 1; y < 4; ++y)
      for (int x = 2; x < 5; ++x) want.push_back(static_cast<float>((c * 5 + y) * 8 + x));
  std::vector<float> flipped = want;
  for (int c = 0; c < 2; ++c)
    for (int y = 0; y < 3; ++y) std::reverse(flipped.begin() + (c * 3 + y) * 3, flipped.begin() + (c * 3 + y + 1) * 3);
  int plain = 0, mirrored = 0;
  for (int i = 0; i < 40; ++i) {
    const std::vector<float> out = Apply(t, d, rng);
    plain += out == want;
    mirrored += out == flipped;
  }
  EXPECT_EQ(plain + mirrored, 40);
  EXPECT_GT(plain, 0);
  EXPECT_GT(mirrored, 0);
  p.set_mirror(false);
  const DataTransformer fixed(p, pb::TEST);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Apply(fixed, d, rng), want);
}

// Every TRAIN output is the source image cropped at some offset, mirrored or not; over many
// draws all offsets and both orientations turn up, and the same seed repeats the sequence.
TEST(TransformTest, RandomCropAndMirrorAreValidAndDeterministic) {
  std::mt19937 gen(6);
  const int c_n = 2, h = 6, w = 7, crop = 4;
  const pb::Datum d = MakeDatum(c_n, h, w, test::RandomBytes(c_n * h * w, gen), 0);
  pb::TransformationParameter p;
  p.set_crop_size(crop);
  p.set_mirror(true);
  const DataTransformer t(p, pb::TRAIN);
  auto matches = [&](const std::vector<float>& out, int ho, int wo, bool mirror) {
    for (int c = 0; c < c_n; ++c)
      for (int y = 0; y < crop; ++y)
        for (int x = 0; x < crop; ++x)
          if (out[(c * crop + y) * crop + (mirror ? crop - 1 - x : x)] !=
              Pixel(d, c, ho + y, wo + x))
            return false;
    return true;
  };
  std::set<std::tuple<int, int, bool>> seen;
  std::mt19937 rng(11), again(11);
  for (int i = 0; i < 300; ++i) {
    const std::vector<float> out = Apply(t, d, rng);
    ASSERT_EQ(out, Apply(t, d, again));
    bool found = false;
    for (int ho = 0; ho <= h - crop; ++ho)
      for (int wo = 0; wo <= w - crop; ++wo)
        for (bool m : {false, true})
          if (matches(out, ho, wo, m)) {
            seen.insert({ho, wo, m});
            found = true;
          }
    ASSERT_TRUE(found) << "draw " << i << " is not a crop of the source";
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>((h - crop + 1) * (w - crop + 1) * 2));
}

TEST(TransformTest, BadDatumsAreErrors) {
  std::mt19937 gen(8), rng(9);
  const DataTransformer t(pb::TransformationParameter(), pb::TRAIN);
  pb::Datum d = MakeDatum(1, 4, 4, test::RandomBytes(15, gen), 0);
  std::string e = ErrorOf([&] { Apply(t, d, rng); });
  EXPECT_NE(e.find("corrupt"), std::string::npos) << e;
  d.set_data(test::RandomBytes(16, gen));
  d.set_encoded(true);
  e = ErrorOf([&] { Apply(t, d, rng); });
  EXPECT_NE(e.find("reached the transformer undecoded"), std::string::npos) << e;
  d.set_encoded(false);
  pb::TransformationParameter p;
  p.set_crop_size(5);
  e = ErrorOf([&] { Apply(DataTransformer(p, pb::TEST), d, rng); });
  EXPECT_NE(e.find("crop_size 5"), std::string::npos) << e;
}

}  // namespace
}  // namespace hogstream
