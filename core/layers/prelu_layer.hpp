// PReLU: y = max(x, 0) + a_c * min(x, 0), with a learned slope a_c per channel (axis 1), or
// one for all channels with prelu_param.channel_shared (then a blob with no axes, as Caffe's).
// The slopes are filled by prelu_param.filler, constant 0.25 when unset. Works in place (the
// input is kept aside: the slope gradient needs it).
#pragma once

#include "core/layers/neuron_layer.hpp"

namespace hogstream {

class PReLULayer : public InputKeepingNeuronLayer {
 public:
  using InputKeepingNeuronLayer::InputKeepingNeuronLayer;
  const char* type() const override { return "PReLU"; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  // The bottom as outer_ x channels_ x inner_; shared_: one slope for every channel.
  int outer_ = 0, channels_ = 0, inner_ = 0;
  bool shared_ = false;
};

}  // namespace hogstream
