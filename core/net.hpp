// Net: a directed acyclic graph of layers built from a NetParameter.
//
// Construction applies the phase/level/stage include-exclude rules, inserts Split layers where
// one top feeds several bottoms, wires in-place layers, resolves shared parameters by name and
// works out which layers need a backward pass (Caffe's rules, force_backward included), then
// lets each in-place BatchNorm -> Scale (-> ReLU) chain run as one layer's passes (FuseLayers;
// the layers and their blobs stay as they are).
//
// Every parameter blob of every layer lives in ONE contiguous buffer (`param_data()`), and
// every gradient in another (`param_diff()`), each blob 64-byte aligned inside it, padding
// zeroed. The sync segments stream these buffers; solvers update them in one sweep.
// A Net is used by one thread at a time.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/blob.hpp"
#include "core/io.hpp"
#include "core/layer.hpp"

namespace hogstream {

struct NetOptions {
  // The state the include/exclude rules are matched against; overrides NetParameter.state.
  pb::Phase phase = pb::TRAIN;
  int level = 0;
  std::vector<std::string> stages;
  // Stand-ins for data layers whose source is absent: top name -> shape. A Data, ImageData,
  // HDF5Data, WindowData or MemoryData layer whose first top is listed becomes an Input layer
  // (its other tops default to the batch size).
  std::map<std::string, std::vector<int>> input_shapes;
  // Where the layers were read from, to name file:line in errors.
  NetSource source;
  // Run each BatchNorm -> Scale (-> ReLU) chain on one blob, all in place, as one layer's
  // passes (see batch_norm_layer.hpp). Off: every layer runs its own (tests compare the two).
  bool fuse = true;
  // Hold blobs that only oneDNN convolutions, fused BatchNorm chains and element-by-element
  // layers (ReLU, Eltwise, Split) touch in the channel-blocked layout (see Layer::Layouts;
  // AssignLayouts). Off: every blob NCHW. Only in CPU mode; inputs and outputs stay NCHW.
  bool blocked = true;
};

class Net {
 public:
  explicit Net(const pb::NetParameter& param, const NetOptions& options = {});
  ~Net();
  Net(const Net&) = delete;
  Net& operator=(const Net&) = delete;

  // Runs every layer forward; returns the total weighted loss.
  float Forward();
  float ForwardFromTo(int start, int end);
  void Backward();
  void BackwardFromTo(int start, int end);
  float ForwardBackward() {
    float loss = Forward();
    Backward();
    return loss;
  }
  // Zeroes every parameter gradient (one memset over the flat diff buffer).
  void ClearParamDiffs();
  // Reshapes every layer for new input shapes.
  void Reshape();

  // Points this net's parameter blobs at `other`'s (matching layers by name; shapes must
  // agree): a test net shares its train net's weights without copying.
  void ShareWeightsFrom(const Net& other);
  // Copies weights from a trained net (.caffemodel contents), matching layers by name. Logs
  // how many layers with parameters were loaded and warns about each left at its initial
  // values. An Error naming `source` when `trained` has no layers (a 0-byte file, a
  // .solverstate) or when none of its layers matches one of this net's layers with
  // parameters (a renamed net).
  void CopyTrainedLayersFrom(const pb::NetParameter& trained,
                             const std::string& source = "the weights file");
  // The same from comma-separated .caffemodel files, later files overriding earlier ones.
  void CopyTrainedLayersFromFiles(const std::string& files);
  // Runs `passes` forward passes and returns the mean of every output element (outputs in
  // output_blobs() order, elements flattened) and, in *mean_loss, the mean weighted loss.
  // `on_pass(i, running_mean_loss)` is called after each pass when given.
  std::vector<double> ForwardMean(int passes, double* mean_loss,
                                  const std::function<void(int, double)>& on_pass = {});
  void ToProto(pb::NetParameter* param, bool write_diff = false) const;

  const std::string& name() const { return name_; }
  pb::Phase phase() const { return phase_; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  const std::vector<std::string>& layer_names() const { return layer_names_; }
  const std::vector<std::shared_ptr<Blob>>& blobs() const { return blobs_; }
  const std::vector<std::string>& blob_names() const { return blob_names_; }
  const std::vector<Blobs>& bottom_vecs() const { return bottom_vecs_; }
  const std::vector<Blobs>& top_vecs() const { return top_vecs_; }
  const std::vector<std::vector<int>>& top_ids() const { return top_ids_; }
  const std::vector<std::vector<int>>& bottom_ids() const { return bottom_ids_; }
  bool layer_need_backward(int i) const { return layer_need_backward_[i]; }
  float blob_loss_weight(int blob_id) const { return blob_loss_weights_[blob_id]; }
  std::shared_ptr<Blob> blob_by_name(const std::string& name) const;
  // Whether the blob (data and diff) is held channel-blocked, nChw16c, rather than NCHW.
  bool blob_blocked(int blob_id) const { return blob_blocked_[blob_id]; }
  Layer* layer_by_name(const std::string& name) const;
  // Blobs produced and consumed by no layer: the net's outputs (losses, accuracies).
  const Blobs& output_blobs() const { return output_blobs_; }
  const std::vector<int>& output_blob_indices() const { return output_blob_ids_; }
  const Blobs& input_blobs() const { return input_blobs_; }

  // Parameters: every layer blob (`params`), of which the unshared ones are `learnable`.
  const std::vector<std::shared_ptr<Blob>>& params() const { return params_; }
  const std::vector<Blob*>& learnable_params() const { return learnable_params_; }
  const std::vector<float>& params_lr() const { return params_lr_; }
  const std::vector<float>& params_weight_decay() const { return params_decay_; }
  // Index of each learnable param's slot in the flat buffers, in floats.
  const std::vector<size_t>& learnable_offsets() const { return learnable_offsets_; }
  // Owner index (into params()) of each param; == own index when not shared.
  const std::vector<int>& param_owners() const { return param_owners_; }
  // Layer index and blob index within the layer of each param.
  const std::vector<std::pair<int, int>>& param_layer_indices() const { return param_layer_indices_; }

  // Points every learnable param at `external`, a buffer with this net's layout
  // (param_buffer_size() floats): Hogwild solvers train one shared copy of the weights this
  // way. With `copy_in` the current values are written there first. The net's own buffer is
  // freed; `external` must outlive the net.
  void UseParamBuffer(float* external, bool copy_in);

  // GPU mode: points every learnable param's device memory at `device`, a device buffer of
  // this net's layout (param_buffer_size() floats), as UseParamBuffer does on the host: one
  // allocation, the blobs views of it, so that one sync segment covers the whole net (a GPU
  // solver's copy under gpus.bin). The device copy is the fresh one from then on, its values
  // the caller's to fill; `device` must outlive the net.
  void UseDeviceParamBuffer(float* device);
  float* device_param_data() { return flat_device_; }
  // The device buffer was written behind the blobs' backs (a segment's kernels, the leader's
  // swap of the master's values in and out): the host copies are stale until read again.
  void DeviceParamsWritten();

  float* param_data() { return flat_data_; }
  float* param_diff() { return flat_diff_; }
  const float* param_data() const { return flat_data_; }
  // Floats in each flat buffer, alignment padding included.
  size_t param_buffer_size() const { return flat_size_; }
  // Learnable values, padding excluded (LeNet: 431,080).
  size_t num_learnable() const { return num_learnable_; }

 private:
  void Init(const pb::NetParameter& param, const NetOptions& options);
  // Init's steps for one layer (`where`: its place in the prototxt; `who` adds its name and
  // type, for one-line errors): make it; wire its bottoms (whether any needs a gradient); its
  // tops, adding the ones a layer makes itself; set it up, its params and their multipliers
  // (whether any is learned), and count its memory into *need_bytes. Then the net's outputs.
  int AddLayer(const pb::LayerParameter& lp, const std::string& where);
  bool WireBottoms(int layer_id, const pb::LayerParameter& lp, const std::string& who,
                   std::set<std::string>* available);
  void WireTops(int layer_id, pb::LayerParameter* lp, const std::string& who, std::set<std::string>* available);
  bool SetUpLayer(int layer_id, const pb::LayerParameter& lp, const std::string& who, double* need_bytes);
  void CollectOutputs(const std::set<std::string>& available);
  void AppendParams(int layer_id);
  void FlattenParams();
  void ComputeBackwardNeeds(const pb::NetParameter& param);
  void FuseLayers();
  void AssignLayouts();

  std::string name_;
  pb::Phase phase_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::string> layer_names_;
  std::map<std::string, int> layer_index_;
  std::vector<std::shared_ptr<Blob>> blobs_;
  std::vector<std::string> blob_names_;
  std::map<std::string, int> blob_index_;
  std::vector<Blobs> bottom_vecs_, top_vecs_;
  std::vector<std::vector<int>> bottom_ids_, top_ids_;
  std::vector<std::vector<bool>> bottom_need_backward_;
  std::vector<bool> layer_need_backward_, blob_need_backward_;
  std::vector<bool> blob_blocked_;
  std::vector<float> blob_loss_weights_;
  Blobs output_blobs_, input_blobs_;
  std::vector<int> output_blob_ids_;

  std::vector<std::shared_ptr<Blob>> params_;
  std::vector<Blob*> learnable_params_;
  std::vector<int> param_owners_;
  std::vector<std::pair<int, int>> param_layer_indices_;
  std::map<std::string, int> param_names_;
  std::vector<std::string> param_display_names_;
  std::vector<float> params_lr_, params_decay_;
  std::vector<size_t> learnable_offsets_;

  float* flat_data_ = nullptr;
  float* flat_diff_ = nullptr;
  float* flat_device_ = nullptr;  // UseDeviceParamBuffer's (borrowed)
  bool flat_pinned_[2] = {false, false};
  bool own_data_ = true;  // false once UseParamBuffer points the params elsewhere
  size_t flat_size_ = 0, num_learnable_ = 0;
};

// Caffe's numbering of a net's outputs in its logs ("Train net output #k", "Test net output
// #k", `caffe test`): Caffe keeps the outputs in a std::set of blob names, so #k counts in name
// order, and Caffe's log tools (parse_log.sh) read the columns by that position. We keep net
// order inside; this is the order to print in. One slot per output element.
struct OutputSlot {
  std::string name;
  const Blob* blob;   // the output blob
  int element;        // within the blob
  size_t flat;        // index in ForwardMean's flattened (net-order) values
  float loss_weight;  // Caffe's " (* w = w*v loss)" suffix when non-zero
};
std::vector<OutputSlot> CaffeOutputOrder(const Net& net);

// True when `state` passes the layer's include/exclude rules.
bool StateMeetsRules(const pb::NetState& state, const pb::LayerParameter& layer);
// Applies the rules: the layers kept for `state`.
pb::NetParameter FilterNet(const pb::NetParameter& param, const pb::NetState& state);
// Inserts Split layers where a top feeds more than one bottom.
pb::NetParameter InsertSplits(const pb::NetParameter& param);

}  // namespace hogstream
