// Embed layer, CPU passes: rows of the table copied out; their gradients added back to the
// rows that were read.
#include "core/layers/embed_layer.hpp"

#include <cmath>

#include "core/filler.hpp"
#include "core/math.hpp"

namespace hogstream {

void EmbedLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::EmbedParameter& p = param_.embed_param();
  HS_REQUIRE(p.num_output() > 0 && p.num_output() <= 2147483647u)
      << "embed_param.num_output must be positive; got " << p.num_output();
  HS_REQUIRE(p.input_dim() > 0 && p.input_dim() <= 2147483647u)
      << "embed_param.input_dim must be positive; got " << p.input_dim();
  num_output_ = static_cast<int>(p.num_output());
  input_dim_ = static_cast<int>(p.input_dim());
  bias_ = p.bias_term();
  blobs_.push_back(std::make_shared<Blob>(
      CheckedShape({input_dim_, num_output_}, "embed_param's table")));
  Fill(p.weight_filler(), blobs_[0].get());
  if (bias_) {
    blobs_.push_back(std::make_shared<Blob>(std::vector<int>{num_output_}));
    Fill(p.bias_filler(), blobs_[1].get());
  }
  for (size_t i = 0; i < blobs_.size(); ++i) set_param_propagate_down(static_cast<int>(i), true);
}

void EmbedLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  std::vector<int64_t> dims(bottom[0]->shape().begin(), bottom[0]->shape().end());
  dims.push_back(num_output_);
  top[0]->Reshape(CheckedShape(dims, "top '" + (param_.top_size() ? param_.top(0) : "") + "'"));
}

int EmbedLayer::Index(float v, int i) const {
  HS_REQUIRE(v >= 0 && v < input_dim_ && v == std::floor(v))
      << "layer '" << param_.name() << "' (Embed): input " << i << " is " << v
      << "; indices must be whole numbers in [0, input_dim = " << input_dim_ << ")";
  return static_cast<int>(v);
}

void EmbedLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float* x = bottom[0]->cpu_data();
  const float* w = blobs_[0]->cpu_data();
  const float* b = bias_ ? blobs_[1]->cpu_data() : nullptr;
  float* y = top[0]->mutable_cpu_data();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) {
    const float* row = w + static_cast<size_t>(Index(x[i], i)) * num_output_;
    float* out = y + static_cast<size_t>(i) * num_output_;
    if (b) {
      for (int j = 0; j < num_output_; ++j) out[j] = row[j] + b[j];
    } else {
      copy(num_output_, row, out);
    }
  }
}

// Learned blobs accumulate their gradients (the solver clears them).
void EmbedLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                              const Blobs& bottom) {
  HS_REQUIRE(!propagate_down[0])
      << "layer '" << param_.name() << "' (Embed) has no gradient for its indices (nor has "
      << "Caffe's) but one is asked of it; set propagate_down: false on it";
  const float* dy = top[0]->cpu_diff();
  const int n = bottom[0]->count();
  if (param_propagate_down(0)) {
    const float* x = bottom[0]->cpu_data();
    float* dw = blobs_[0]->mutable_cpu_diff();
    for (int i = 0; i < n; ++i)
      axpy(num_output_, 1.f, dy + static_cast<size_t>(i) * num_output_,
           dw + static_cast<size_t>(Index(x[i], i)) * num_output_);
  }
  if (bias_ && param_propagate_down(1)) {
    float* db = blobs_[1]->mutable_cpu_diff();
    for (int i = 0; i < n; ++i) axpy(num_output_, 1.f, dy + static_cast<size_t>(i) * num_output_, db);
  }
}

HS_REGISTER_LAYER(Embed, EmbedLayer);

}  // namespace hogstream
