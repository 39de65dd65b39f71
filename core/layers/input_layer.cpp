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
  for (int i = 0; i < tops; ++i) {
    const pb::BlobShape& shape = p.shape(shapes == 1 ? 0 : i);
    // Checked as given (64-bit dims) before the blob is shaped: a batch of 1e9 is one clear
    // error, not an overflow or an allocation failure later.
    const std::vector<int64_t> dims(shape.dim().begin(), shape.dim().end());
    const std::string name = i < param_.top_size() ? param_.top(i) : std::to_string(i);
    top[i]->Reshape(CheckedShape(dims, "top '" + name + "'"));
  }
}

HS_REGISTER_LAYER(Input, InputLayer);

}  // namespace hogstream
