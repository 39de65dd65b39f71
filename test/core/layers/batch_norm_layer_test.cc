// BatchNorm: batch-statistics and stored-statistics forward against a reference, Caffe's
// running sums (with the unbiased variance), the default of use_global_stats per phase,
// in-place use, numerical gradients in both modes, and errors.
#include "core/layers/batch_norm_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "core/math.hpp"
#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

pb::LayerParameter Param(pb::Phase phase, int use_global = -1, float fraction = 0.999f) {
  pb::LayerParameter p;
  p.set_type("BatchNorm");
  p.set_phase(phase);
  if (use_global >= 0) p.mutable_batch_norm_param()->set_use_global_stats(use_global == 1);
  p.mutable_batch_norm_param()->set_moving_average_fraction(fraction);
  p.mutable_batch_norm_param()->set_eps(1e-4f);
  return p;
}

// Per-channel mean and biased variance of an N x C x (spatial) blob.
void Stats(const Blob& x, std::vector<double>* mean, std::vector<double>* var) {
  const int num = x.shape(0), ch = x.num_axes() == 1 ? 1 : x.shape(1);
  const int spatial = x.count() / (num * ch);
  mean->assign(ch, 0);
  var->assign(ch, 0);
  for (int n = 0; n < num; ++n)
    for (int c = 0; c < ch; ++c)
      for (int i = 0; i < spatial; ++i) (*mean)[c] += x.cpu_data()[(n * ch + c) * spatial + i];
  for (double& m : *mean) m /= num * spatial;
  for (int n = 0; n < num; ++n)
    for (int c = 0; c < ch; ++c)
      for (int i = 0; i < spatial; ++i) {
        const double d = x.cpu_data()[(n * ch + c) * spatial + i] - (*mean)[c];
        (*var)[c] += d * d;
      }
  for (double& v : *var) v /= num * spatial;
}

void ExpectNormalised(const Blob& x, const Blob& y, const std::vector<double>& mean,
                      const std::vector<double>& var, double eps) {
  const int num = x.shape(0), ch = static_cast<int>(mean.size());
  const int spatial = x.count() / (num * ch);
  for (int i = 0; i < x.count(); ++i) {
    const int c = (i / spatial) % ch;
    const double want = (x.cpu_data()[i] - mean[c]) / std::sqrt(var[c] + eps);
    EXPECT_NEAR(y.cpu_data()[i], want, 1e-4 * std::max(1.0, std::fabs(want))) << i;
  }
}

class BatchNormShapeTest : public ::testing::TestWithParam<std::vector<int>> {};

TEST_P(BatchNormShapeTest, TrainForwardUsesBatchStatsAndUpdatesRunningSums) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(GetParam()), y;
  const float fraction = 0.9f;
  auto layer = CreateLayer(Param(pb::TRAIN, -1, fraction));
  layer->SetUp({&x}, {&y});
  ASSERT_EQ(layer->blobs().size(), 3u);
  std::vector<double> mean1, var1, mean2, var2;

  test::FillGaussian(&x, gen, 1.5f, 2.f);
  layer->Forward({&x}, {&y});
  Stats(x, &mean1, &var1);
  ExpectNormalised(x, y, mean1, var1, 1e-4);

  test::FillGaussian(&x, gen, -0.5f, 0.7f);
  layer->Forward({&x}, {&y});
  Stats(x, &mean2, &var2);
  ExpectNormalised(x, y, mean2, var2, 1e-4);

  const double m = x.count() / static_cast<double>(mean1.size());
  EXPECT_NEAR(layer->blobs()[2]->cpu_data()[0], fraction * 1 + 1, 1e-6);
  for (size_t c = 0; c < mean1.size(); ++c) {
    EXPECT_NEAR(layer->blobs()[0]->cpu_data()[c], fraction * mean1[c] + mean2[c], 1e-4);
    EXPECT_NEAR(layer->blobs()[1]->cpu_data()[c],
                (fraction * var1[c] + var2[c]) * m / (m - 1), 1e-4 * (1 + var1[c]));
  }
}

TEST_P(BatchNormShapeTest, GlobalStatsForwardUsesStoredSums) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(GetParam()), y;
  test::FillGaussian(&x, gen);
  auto layer = CreateLayer(Param(pb::TEST));  // TEST defaults to the stored statistics
  layer->SetUp({&x}, {&y});
  const int ch = layer->blobs()[0]->count();
  test::FillGaussian(layer->blobs()[0].get(), gen);
  test::FillUniform(layer->blobs()[1].get(), gen, 0.5f, 2.f);
  test::FillUniform(layer->blobs()[2].get(), gen, 0.5f, 3.f);
  layer->Forward({&x}, {&y});
  const float factor = layer->blobs()[2]->cpu_data()[0];
  std::vector<double> mean(ch), var(ch);
  for (int c = 0; c < ch; ++c) {
    mean[c] = layer->blobs()[0]->cpu_data()[c] / factor;
    var[c] = layer->blobs()[1]->cpu_data()[c] / factor;
  }
  ExpectNormalised(x, y, mean, var, 1e-4);
  EXPECT_EQ(layer->blobs()[2]->cpu_data()[0], factor);  // nothing accumulates

  // A zero factor (never trained) reads as zero mean and variance, as in Caffe.
  layer->blobs()[2]->mutable_cpu_data()[0] = 0.f;
  layer->Forward({&x}, {&y});
  ExpectNormalised(x, y, std::vector<double>(ch, 0.0), std::vector<double>(ch, 0.0), 1e-4);
}

TEST_P(BatchNormShapeTest, GradientWithBatchStats) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(GetParam()), y;
  test::FillGaussian(&x, gen, 0.5f, 1.5f);
  BatchNormLayer layer(Param(pb::TRAIN));
  layer.SetUp({&x}, {&y});
  test::CheckGradients(&layer, {&x}, {&y});
}

TEST_P(BatchNormShapeTest, GradientWithGlobalStats) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(GetParam()), y;
  test::FillGaussian(&x, gen);
  BatchNormLayer layer(Param(pb::TRAIN, 1));
  layer.SetUp({&x}, {&y});
  test::FillGaussian(layer.blobs()[0].get(), gen);
  test::FillUniform(layer.blobs()[1].get(), gen, 0.5f, 2.f);
  test::FillUniform(layer.blobs()[2].get(), gen, 0.5f, 3.f);
  test::CheckGradients(&layer, {&x}, {&y});
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormShapeTest,
                         ::testing::Values(std::vector<int>{4, 3, 3, 2},
                                           std::vector<int>{5, 4}, std::vector<int>{3, 2, 5},
                                           std::vector<int>{6}));

TEST(BatchNormLayerTest, PhaseChoosesStatsUnlessGiven) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(4, 2, 3, 3), y_train, y_test, y_override;
  test::FillGaussian(&x, gen, 2.f, 1.f);
  auto train = CreateLayer(Param(pb::TRAIN));
  auto test = CreateLayer(Param(pb::TEST));
  auto override_test = CreateLayer(Param(pb::TEST, 0));
  train->SetUp({&x}, {&y_train});
  test->SetUp({&x}, {&y_test});
  override_test->SetUp({&x}, {&y_override});
  train->Forward({&x}, {&y_train});
  test->Forward({&x}, {&y_test});
  override_test->Forward({&x}, {&y_override});
  for (int i = 0; i < x.count(); ++i) {
    EXPECT_FLOAT_EQ(y_override.cpu_data()[i], y_train.cpu_data()[i]);
    // Stored statistics are all zero: y = x / sqrt(eps).
    EXPECT_NEAR(y_test.cpu_data()[i], x.cpu_data()[i] / std::sqrt(1e-4f), 1e-3);
  }
  EXPECT_EQ(test->blobs()[2]->cpu_data()[0], 0.f);
  EXPECT_EQ(train->blobs()[2]->cpu_data()[0], 1.f);
}

TEST(BatchNormLayerTest, InPlaceMatchesOutOfPlace) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(3, 2, 4, 3), y, inplace, dy(3, 2, 4, 3);
  test::FillGaussian(&x, gen);
  test::FillGaussian(&dy, gen);
  inplace.ReshapeLike(x);
  copy(x.count(), x.cpu_data(), inplace.mutable_cpu_data());
  BatchNormLayer a(Param(pb::TRAIN)), b(Param(pb::TRAIN));
  a.SetUp({&x}, {&y});
  b.SetUp({&inplace}, {&inplace});
  a.Forward({&x}, {&y});
  b.Forward({&inplace}, {&inplace});
  copy(dy.count(), dy.cpu_data(), y.mutable_cpu_diff());
  copy(dy.count(), dy.cpu_data(), inplace.mutable_cpu_diff());
  a.Backward({&y}, {true}, {&x});
  b.Backward({&inplace}, {true}, {&inplace});
  for (int i = 0; i < x.count(); ++i) {
    EXPECT_FLOAT_EQ(inplace.cpu_data()[i], y.cpu_data()[i]);
    EXPECT_FLOAT_EQ(inplace.cpu_diff()[i], x.cpu_diff()[i]);
  }
}

// The vectorised channel loops (sums in lanes of 32, y and x_norm in one loop) on channels
// longer than a lane block (spatial 63, 256, 37) and on N x C inputs (spatial 1), in both
// modes, in place and not: y, the running sums and dx against direct double-precision formulas.
TEST(BatchNormLayerTest, LongChannelsMatchDirectFormulas) {
  std::mt19937 gen(::hogstream::TestSeed());
  const std::vector<std::vector<int>> shapes{{3, 5, 7, 9}, {2, 4, 16, 16}, {64, 3}, {2, 3, 37}};
  for (const auto& shape : shapes) {
    for (int global = 0; global < 2; ++global) {
      for (int in_place = 0; in_place < 2; ++in_place) {
        Blob x(shape), y, dy(shape), saved_x(shape);
        test::FillGaussian(&x, gen, 1.f, 3.f);
        test::FillGaussian(&dy, gen);
        copy(x.count(), x.cpu_data(), saved_x.mutable_cpu_data());
        BatchNormLayer layer(Param(pb::TRAIN, global));
        Blob* top = in_place ? &x : &y;
        layer.SetUp({&x}, {top});
        const int ch = layer.blobs()[0]->count();
        if (global) {
          test::FillGaussian(layer.blobs()[0].get(), gen);
          test::FillUniform(layer.blobs()[1].get(), gen, 0.5f, 2.f);
          test::FillUniform(layer.blobs()[2].get(), gen, 0.5f, 3.f);
        }
        std::vector<float> sums0(layer.blobs()[0]->cpu_data(), layer.blobs()[0]->cpu_data() + ch);
        layer.Forward({&x}, {top});
        std::vector<double> mean, var;
        if (global) {
          const double f = layer.blobs()[2]->cpu_data()[0];
          for (int c = 0; c < ch; ++c) {
            mean.push_back(layer.blobs()[0]->cpu_data()[c] / f);
            var.push_back(layer.blobs()[1]->cpu_data()[c] / f);
          }
        } else {
          Stats(saved_x, &mean, &var);
          for (int c = 0; c < ch; ++c) {
            EXPECT_NEAR(layer.blobs()[0]->cpu_data()[c], 0.999 * sums0[c] + mean[c], 1e-5);
          }
        }
        ExpectNormalised(saved_x, *top, mean, var, 1e-4);
        // dx against the formula, with y recomputed in double.
        const int num = shape[0], spatial = x.count() / (num * ch);
        std::vector<double> yd(x.count()), sum_dy(ch, 0), sum_dyy(ch, 0);
        for (int i = 0; i < x.count(); ++i) {
          const int c = (i / spatial) % ch;
          yd[i] = (saved_x.cpu_data()[i] - mean[c]) / std::sqrt(var[c] + 1e-4);
          sum_dy[c] += dy.cpu_data()[i];
          sum_dyy[c] += dy.cpu_data()[i] * yd[i];
        }
        copy(dy.count(), dy.cpu_data(), top->mutable_cpu_diff());
        layer.Backward({top}, {true}, {&x});
        const double m = static_cast<double>(num) * spatial;
        for (int i = 0; i < x.count(); ++i) {
          const int c = (i / spatial) % ch;
          double want = dy.cpu_data()[i];
          if (!global) want -= sum_dy[c] / m + sum_dyy[c] / m * yd[i];
          want /= std::sqrt(var[c] + 1e-4);
          ASSERT_NEAR(x.cpu_diff()[i], want, 1e-4 * (1 + std::fabs(want)))
              << i << " shape " << ::testing::PrintToString(shape) << " global " << global
              << " in place " << in_place;
        }
      }
    }
  }
}

TEST(BatchNormLayerTest, StatisticsAreNotLearned) {
  Blob x(2, 3, 2, 2), y;
  pb::LayerParameter p = Param(pb::TRAIN);
  BatchNormLayer layer(p);
  layer.SetUp({&x}, {&y});
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(layer.param_propagate_down(i));
    EXPECT_EQ(layer.layer_param().param(i).lr_mult(), 0.f);
  }
  p.add_param()->set_lr_mult(0.f);
  p.add_param()->set_lr_mult(1.f);
  auto learned = CreateLayer(p);
  EXPECT_THROW(learned->SetUp({&x}, {&y}), Error);
}

TEST(BatchNormLayerTest, ChannelChangeIsAnError) {
  Blob x(2, 3, 2, 2), x4(2, 4, 2, 2), y;
  auto layer = CreateLayer(Param(pb::TRAIN));
  layer->SetUp({&x}, {&y});
  EXPECT_THROW(layer->Forward({&x4}, {&y}), Error);
}

}  // namespace
}  // namespace hogstream
