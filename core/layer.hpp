// Layer: the unit a Net is built from. A layer owns its learnable blobs (weights, bias,
// running statistics), computes tops from bottoms in Forward and bottom/param gradients from
// top gradients in Backward. Each has a CPU implementation; GPU twins (HS_REGISTER_GPU_LAYER,
// in the hogstream_gpu library) override the _gpu passes, and a layer without one falls back
// to the CPU passes (the SyncedMemory heads keep data consistent either way).
//
// Layers register themselves by their Caffe type name:
//     HS_REGISTER_LAYER(ReLU, ReLULayer);
// and are made with CreateLayer(param). Errors in a layer's parameters or bottom shapes are
// Errors; the Net prefixes them with the layer's name and type.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/blob.hpp"
#include "base/common.hpp"
#include "core/proto/hogstream.pb.h"

namespace hogstream {

using Blobs = std::vector<Blob*>;

class Layer {
 public:
  explicit Layer(const pb::LayerParameter& param);
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  // Checks blob counts, runs LayerSetUp and Reshape, and records loss weights on the tops.
  void SetUp(const Blobs& bottom, const Blobs& top);
  // One-time set-up: read parameters, create and fill learnable blobs.
  virtual void LayerSetUp(const Blobs& bottom, const Blobs& top) {}
  // Shape the tops (and internal buffers) for the current bottom shapes; called every pass
  // by the Net when inputs may have changed shape.
  virtual void Reshape(const Blobs& bottom, const Blobs& top) = 0;

  // Computes the tops and returns the weighted loss this layer contributes.
  float Forward(const Blobs& bottom, const Blobs& top);
  void Backward(const Blobs& top, const std::vector<bool>& propagate_down, const Blobs& bottom);

  virtual const char* type() const = 0;
  const pb::LayerParameter& layer_param() const { return param_; }
  pb::Phase phase() const { return phase_; }
  std::vector<std::shared_ptr<Blob>>& blobs() { return blobs_; }
  const std::vector<std::shared_ptr<Blob>>& blobs() const { return blobs_; }

  float loss(int top_index) const {
    return top_index < static_cast<int>(loss_.size()) ? loss_[top_index] : 0.f;
  }
  void set_loss(int top_index, float value);

  bool param_propagate_down(int i) const {
    return i < static_cast<int>(param_propagate_down_.size()) && param_propagate_down_[i];
  }
  void set_param_propagate_down(int i, bool value);

  // Blob-count contracts, checked by SetUp. -1 = no constraint.
  virtual int ExactNumBottomBlobs() const { return -1; }
  virtual int MinBottomBlobs() const { return -1; }
  virtual int MaxBottomBlobs() const { return -1; }
  virtual int ExactNumTopBlobs() const { return -1; }
  virtual int MinTopBlobs() const { return -1; }
  virtual int MaxTopBlobs() const { return -1; }
  virtual bool EqualNumBottomTopBlobs() const { return false; }
  // Loss layers create their top themselves when the prototxt names none.
  virtual bool AutoTopBlobs() const { return false; }
  // Whether force_backward may make this bottom receive a gradient (false for labels).
  virtual bool AllowForceBackward(int bottom_index) const { return true; }
  // Whether the tops of this layer are a loss by default (loss weight 1 on top 0).
  virtual bool IsLoss() const { return false; }

  // Channel-blocked blobs (Net::AssignLayouts): a 4-axis blob whose channels are a multiple
  // of 16 may be held as oneDNN's nChw16c (image n, block of 16 channels b, then y, x, then
  // the 16 channels) where every layer that touches it can take that, which saves the
  // convolutions' reorders. How this layer's CPU passes take their blobs:
  //   kPlain  NCHW only (the default);
  //   kAny    element by element, in whatever layout its blobs share (all of them one);
  //   kEach   each bottom and top in the layout SetBlocked gives it.
  enum class Layouts { kPlain, kAny, kEach };
  virtual Layouts LayoutSupport() const { return Layouts::kPlain; }
  // kEach layers whose NCHW-in, blocked-out pass is slow (a gather): the Net then keeps their
  // tops NCHW wherever their bottom is.
  virtual bool BlockedOutNeedsBlockedIn() const { return false; }
  // Called by the Net (kAny and kEach layers) once layouts are assigned, before any pass.
  virtual void SetBlocked(const std::vector<bool>& bottom, const std::vector<bool>& top) {}

 protected:
  // Class labels arrive as floats. LabelValue is the class index, or -1 for a value that is
  // not in int range (NaN, 1e10: casting those to int is undefined). CheckLabel raises an
  // Error naming this layer (Forward's errors reach the user without the Net's layer prefix)
  // unless 0 <= l < classes.
  static int LabelValue(float label) {
    return label > -2147483648.f && label < 2147483648.f ? static_cast<int>(label) : -1;
  }
  void CheckLabel(float label, int l, int classes, int item, int position, bool spatial) const;

  // After Forward has read the loss (in GPU mode, once the stream has been waited for): checks
  // that a GPU pass left for the host (SoftmaxWithLoss's labels), without a wait of its own.
  virtual void FinishForward() {}
  virtual void Forward_cpu(const Blobs& bottom, const Blobs& top) = 0;
  virtual void Forward_gpu(const Blobs& bottom, const Blobs& top) { Forward_cpu(bottom, top); }
  virtual void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                            const Blobs& bottom) = 0;
  virtual void Backward_gpu(const Blobs& top, const std::vector<bool>& propagate_down,
                            const Blobs& bottom) {
    Backward_cpu(top, propagate_down, bottom);
  }

  pb::LayerParameter param_;
  pb::Phase phase_;
  std::vector<std::shared_ptr<Blob>> blobs_;
  std::vector<bool> param_propagate_down_;
  std::vector<float> loss_;

 private:
  void CheckBlobCounts(const Blobs& bottom, const Blobs& top) const;
  void SetLossWeights(const Blobs& top);
};

// ---------------------------------------------------------------- registry

using LayerFactory = std::function<std::unique_ptr<Layer>(const pb::LayerParameter&)>;

// Makes the layer for param.type(); an unknown type is an Error naming the layer.
std::unique_ptr<Layer> CreateLayer(const pb::LayerParameter& param);
bool LayerTypeKnown(const std::string& type);
std::vector<std::string> LayerTypeList();
void RegisterLayer(const std::string& type, LayerFactory factory);

// GPU twins (the hogstream_gpu library registers them when it loads; see gpu_engine.hpp):
// CreateLayer makes one instead of the CPU class when the calling thread is in GPU mode.
void RegisterGpuLayer(const std::string& type, LayerFactory factory);
std::vector<std::string> GpuLayerTypeList();

struct LayerRegistrar {
  LayerRegistrar(const std::string& type, LayerFactory factory) {
    RegisterLayer(type, std::move(factory));
  }
};

struct GpuLayerRegistrar {
  GpuLayerRegistrar(const std::string& type, LayerFactory factory) {
    RegisterGpuLayer(type, std::move(factory));
  }
};

#define HS_REGISTER_GPU_LAYER(type_name, Class)                                          \
  static ::hogstream::GpuLayerRegistrar hs_gpu_registrar_##type_name(                   \
      #type_name, [](const ::hogstream::pb::LayerParameter& p) {                        \
        return std::unique_ptr<::hogstream::Layer>(new Class(p));                       \
      })

#define HS_REGISTER_LAYER(type_name, Class)                                              \
  static ::hogstream::LayerRegistrar hs_registrar_##type_name(                          \
      #type_name, [](const ::hogstream::pb::LayerParameter& p) {                        \
        return std::unique_ptr<::hogstream::Layer>(new Class(p));                       \
      })

}  // namespace hogstream
