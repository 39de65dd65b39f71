// Parameter layer, CPU passes: the top is a copy of the blob; the blob's gradient gathers the
// top's.
#include "core/layers/parameter_layer.hpp"

#include "core/math.hpp"

namespace hogstream {

void ParameterLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  HS_REQUIRE(param_.has_parameter_param() && param_.parameter_param().has_shape())
      << "parameter_param { shape { dim: ... } } must be given";
  auto want = std::make_shared<Blob>();
  want->Reshape(param_.parameter_param().shape());
  if (blobs_.empty()) {
    blobs_.push_back(want);  // zeros, as Caffe starts it
  }
  HS_REQUIRE(blobs_[0]->shape() == want->shape())
      << "its blob has shape " << blobs_[0]->shape_string() << ", parameter_param.shape says "
      << want->shape_string();
  param_propagate_down_.assign(1, true);
}

void ParameterLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  top[0]->Reshape(blobs_[0]->shape());
}

void ParameterLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  copy(blobs_[0]->count(), blobs_[0]->cpu_data(), top[0]->mutable_cpu_data());
}

void ParameterLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                  const Blobs& bottom) {
  if (!param_propagate_down(0)) return;
  axpy(blobs_[0]->count(), 1.f, top[0]->cpu_diff(), blobs_[0]->mutable_cpu_diff());
}

HS_REGISTER_LAYER(Parameter, ParameterLayer);

}  // namespace hogstream
