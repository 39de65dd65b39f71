// Softmax layer, CPU forward and backward over one axis.
#include "core/layers/softmax_layer.hpp"

#include <algorithm>
#include <cmath>

namespace hogstream {

void SoftmaxLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const Blob& b = *bottom[0];
  const int axis = param_.softmax_param().axis();
  HS_REQUIRE(axis >= -b.num_axes() && axis < b.num_axes())
      << "softmax axis " << axis << " out of range for bottom of shape " << b.shape_string();
  const int a = b.CanonicalAxisIndex(axis);
  outer_ = b.count(0, a);
  channels_ = b.shape(a);
  inner_ = b.count(a + 1);
  top[0]->ReshapeLike(b);
}

// Within one outer index, element (c, i) lives at c * inner_ + i. Every element is written
// only after it has been read, which keeps the in-place case correct.
void SoftmaxLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const int dim = channels_ * inner_;
  const float* bottom_data = bottom[0]->cpu_data();
  float* top_data = top[0]->mutable_cpu_data();
  std::vector<float> mx(inner_), sum(inner_);
  for (int o = 0; o < outer_; ++o) {
    const float* x = bottom_data + o * dim;
    float* y = top_data + o * dim;
    std::fill(mx.begin(), mx.end(), -INFINITY);
    for (int c = 0; c < channels_; ++c)
      for (int i = 0; i < inner_; ++i) mx[i] = std::max(mx[i], x[c * inner_ + i]);
    std::fill(sum.begin(), sum.end(), 0.f);
    for (int c = 0; c < channels_; ++c)
      for (int i = 0; i < inner_; ++i) {
        y[c * inner_ + i] = std::exp(x[c * inner_ + i] - mx[i]);
        sum[i] += y[c * inner_ + i];
      }
    for (int c = 0; c < channels_; ++c)
      for (int i = 0; i < inner_; ++i) y[c * inner_ + i] /= sum[i];
  }
}

// dx = y * (dy - sum_c dy * y), the sum taken over the softmax axis.
void SoftmaxLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const int dim = channels_ * inner_;
  const float* top_data = top[0]->cpu_data();
  const float* top_diff = top[0]->cpu_diff();
  float* bottom_diff = bottom[0]->mutable_cpu_diff();
  std::vector<float> dot(inner_);
  for (int o = 0; o < outer_; ++o) {
    const float* y = top_data + o * dim;
    const float* dy = top_diff + o * dim;
    float* dx = bottom_diff + o * dim;
    std::fill(dot.begin(), dot.end(), 0.f);
    for (int c = 0; c < channels_; ++c)
      for (int i = 0; i < inner_; ++i) dot[i] += dy[c * inner_ + i] * y[c * inner_ + i];
    for (int c = 0; c < channels_; ++c)
      for (int i = 0; i < inner_; ++i) {
        const int k = c * inner_ + i;
        dx[k] = y[k] * (dy[k] - dot[i]);
      }
  }
}

HS_REGISTER_LAYER(Softmax, SoftmaxLayer);

}  // namespace hogstream
