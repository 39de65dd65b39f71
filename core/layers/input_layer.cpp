// Input layer: shapes its tops from input_param.
#include "core/layers/input_layer.hpp"

namespace hogstream {

void InputLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::InputParameter& p = param_.input_param();
  const int shapes = p.shape_size(), tops = static_cast<int>(top.size());
  HS_REQUIRE(shapes <= 1 || shapes == tops)
      << "input_param has " << shapes << " shapes for " << tops
      << " tops; give one shape, one per top, or none";
  if (shapes == 0) return;
  for (int i = 0; i < tops; ++i) top[i]->Reshape(p.shape(shapes == 1 ? 0 : i));
}

HS_REGISTER_LAYER(Input, InputLayer);

}  // namespace hogstream
