#include "core/layers/inner_product_layer.hpp"

#include "core/filler.hpp"
#include "core/math.hpp"

namespace hogstream {

void InnerProductLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const auto& ip = param_.inner_product_param();
  HS_REQUIRE(ip.has_num_output() && ip.num_output() > 0) << "num_output must be > 0";
  N_ = static_cast<int>(ip.num_output());
  bias_term_ = ip.bias_term();
  transpose_ = ip.transpose();
  HS_REQUIRE(ip.axis() >= -bottom[0]->num_axes() && ip.axis() < bottom[0]->num_axes())
      << "axis " << ip.axis() << " out of range for input shape " << bottom[0]->shape_string();
  const int axis = bottom[0]->CanonicalAxisIndex(ip.axis());
  K_ = bottom[0]->count(axis);
  if (blobs_.empty()) {
    blobs_.push_back(std::make_shared<Blob>(transpose_ ? std::vector<int>{K_, N_}
                                                       : std::vector<int>{N_, K_}));
    Fill(ip.weight_filler(), blobs_[0].get());
    if (bias_term_) {
      blobs_.push_back(std::make_shared<Blob>(std::vector<int>{N_}));
      Fill(ip.bias_filler(), blobs_[1].get());
    }
  }
  param_propagate_down_.assign(blobs_.size(), true);
}

void InnerProductLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const int axis = bottom[0]->CanonicalAxisIndex(param_.inner_product_param().axis());
  HS_REQUIRE(bottom[0]->count(axis) == K_)
      << "input shape " << bottom[0]->shape_string() << " gives " << bottom[0]->count(axis)
      << " features from axis " << axis << ", but the weights expect " << K_;
  M_ = bottom[0]->count(0, axis);
  std::vector<int> shape(bottom[0]->shape().begin(), bottom[0]->shape().begin() + axis);
  shape.push_back(N_);
  top[0]->Reshape(shape);
}

void InnerProductLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float* x = bottom[0]->cpu_data();
  const float* w = blobs_[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  gemm(Trans::No, transpose_ ? Trans::No : Trans::Yes, M_, N_, K_, 1.f, x, w, 0.f, y);
  if (bias_term_) {
    const float* b = blobs_[1]->cpu_data();
    for (int i = 0; i < M_; ++i) axpy(N_, 1.f, b, y + i * N_);
  }
}

void InnerProductLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                     const Blobs& bottom) {
  const float* dy = top[0]->cpu_diff();
  const float* x = bottom[0]->cpu_data();
  if (param_propagate_down(0)) {
    float* dw = blobs_[0]->mutable_cpu_diff();
    if (transpose_) {
      gemm(Trans::Yes, Trans::No, K_, N_, M_, 1.f, x, dy, 1.f, dw);  // dW(KxN) += X^T dY
    } else {
      gemm(Trans::Yes, Trans::No, N_, K_, M_, 1.f, dy, x, 1.f, dw);  // dW(NxK) += dY^T X
    }
  }
  if (bias_term_ && param_propagate_down(1)) {
    float* db = blobs_[1]->mutable_cpu_diff();
    for (int i = 0; i < M_; ++i) axpy(N_, 1.f, dy + i * N_, db);
  }
  if (propagate_down[0]) {
    const float* w = blobs_[0]->cpu_data();
    gemm(Trans::No, transpose_ ? Trans::Yes : Trans::No, M_, K_, N_, 1.f, dy, w, 0.f,
         bottom[0]->mutable_cpu_diff());
  }
}

HS_REGISTER_LAYER(InnerProduct, InnerProductLayer);

}  // namespace hogstream
