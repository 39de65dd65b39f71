// The gradient checker must catch a wrong gradient, or every layer test passing means nothing.
#include "test/core/gradient_checker.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest-spi.h>

namespace hogstream {
namespace HS_UNITY_ID {

// y = x^2 elementwise, with a backward that is right (scale 2) or wrong (scale 2.2).
class SquareLayer : public Layer {
 public:
  SquareLayer(float grad_scale) : Layer(pb::LayerParameter()), scale_(grad_scale) {}
  const char* type() const override { return "Square"; }
  void Reshape(const Blobs& bottom, const Blobs& top) override { top[0]->ReshapeLike(*bottom[0]); }

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override {
    for (int i = 0; i < bottom[0]->count(); ++i)
      top[0]->mutable_cpu_data()[i] = bottom[0]->cpu_data()[i] * bottom[0]->cpu_data()[i];
  }
  void Backward_cpu(const Blobs& top, const std::vector<bool>& pd, const Blobs& bottom) override {
    for (int i = 0; i < bottom[0]->count(); ++i)
      bottom[0]->mutable_cpu_diff()[i] =
          scale_ * bottom[0]->cpu_data()[i] * top[0]->cpu_diff()[i];
  }

 private:
  float scale_;
};

void Check(float scale) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(std::vector<int>{3, 4}), y;
  test::FillUniform(&x, gen, 1.f, 2.f);  // |x| >= 1: the error is well above threshold
  SquareLayer layer(scale);
  layer.SetUp({&x}, {&y});
  test::CheckGradients(&layer, {&x}, {&y});
}

TEST(GradientChecker, AcceptsTheRightGradient) { Check(2.f); }

TEST(GradientChecker, CatchesAWrongGradient) {
  EXPECT_FATAL_FAILURE(Check(2.2f), "Square bottom 0");
}

}  // namespace
}  // namespace hogstream
