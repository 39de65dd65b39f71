#include "core/net.hpp"

#include <glog/logging.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>

#include "core/context.hpp"
#include "core/layers/batch_norm_layer.hpp"
#include "core/layers/relu_layer.hpp"
#include "core/layers/scale_layer.hpp"
#include "core/math.hpp"

namespace hogstream {

namespace {
constexpr size_t kAlignFloats = 16;  // 64 bytes
size_t AlignUp(size_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

bool RuleMet(const pb::NetState& state, const pb::NetStateRule& rule) {
  if (rule.has_phase() && rule.phase() != state.phase()) return false;
  if (rule.has_min_level() && state.level() < rule.min_level()) return false;
  if (rule.has_max_level() && state.level() > rule.max_level()) return false;
  auto has_stage = [&](const std::string& s) {
    return std::find(state.stage().begin(), state.stage().end(), s) != state.stage().end();
  };
  for (const auto& s : rule.stage())
    if (!has_stage(s)) return false;
  for (const auto& s : rule.not_stage())
    if (has_stage(s)) return false;
  return true;
}

// Deprecated net-level `input` fields become an Input layer at the front.
pb::NetParameter UpgradeNetInputs(const pb::NetParameter& param) {
  if (param.input_size() == 0) return param;
  pb::NetParameter out = param;
  out.clear_input();
  out.clear_input_shape();
  out.clear_input_dim();
  out.clear_layer();
  pb::LayerParameter* in = out.add_layer();
  in->set_name("input");
  in->set_type("Input");
  const bool dims = param.input_dim_size() > 0;
  HS_REQUIRE(dims ? param.input_dim_size() == 4 * param.input_size()
                  : param.input_shape_size() == param.input_size())
      << "net inputs need one shape each (input_shape, or 4 input_dim values per input)";
  for (int i = 0; i < param.input_size(); ++i) {
    in->add_top(param.input(i));
    pb::BlobShape* s = in->mutable_input_param()->add_shape();
    if (dims) {
      for (int d = 0; d < 4; ++d) s->add_dim(param.input_dim(4 * i + d));
    } else {
      *s = param.input_shape(i);
    }
  }
  for (const auto& l : param.layer()) *out.add_layer() = l;
  return out;
}
}  // namespace

bool StateMeetsRules(const pb::NetState& state, const pb::LayerParameter& layer) {
  HS_REQUIRE(layer.include_size() == 0 || layer.exclude_size() == 0)
      << "layer '" << layer.name() << "' has both include and exclude rules";
  if (layer.include_size() > 0) {
    for (const auto& r : layer.include())
      if (RuleMet(state, r)) return true;
    return false;
  }
  for (const auto& r : layer.exclude())
    if (RuleMet(state, r)) return false;
  return true;
}

pb::NetParameter FilterNet(const pb::NetParameter& param, const pb::NetState& state) {
  pb::NetParameter out = param;
  out.clear_layer();
  for (const auto& l : param.layer())
    if (StateMeetsRules(state, l)) *out.add_layer() = l;
  return out;
}

pb::NetParameter InsertSplits(const pb::NetParameter& param) {
  // Walk the layers tracking, for each blob name, which (layer, top) produced its current
  // value, and count the bottoms that read each such value.
  std::map<std::string, std::pair<int, int>> producer;
  std::map<std::pair<int, int>, int> readers;
  std::map<std::pair<int, int>, int> next_reader;
  std::vector<std::vector<std::pair<int, int>>> bottom_source(param.layer_size());
  for (int i = 0; i < param.layer_size(); ++i) {
    const auto& l = param.layer(i);
    for (int b = 0; b < l.bottom_size(); ++b) {
      auto it = producer.find(l.bottom(b));
      HS_REQUIRE(it != producer.end())
          << "layer '" << l.name() << "' reads bottom '" << l.bottom(b)
          << "', which no earlier layer produces";
      bottom_source[i].push_back(it->second);
      ++readers[it->second];
    }
    for (int t = 0; t < l.top_size(); ++t) producer[l.top(t)] = {i, t};
  }
  pb::NetParameter out = param;
  out.clear_layer();
  for (int i = 0; i < param.layer_size(); ++i) {
    pb::LayerParameter* l = out.add_layer();
    *l = param.layer(i);
    for (int b = 0; b < l->bottom_size(); ++b) {
      const auto src = bottom_source[i][b];
      if (readers[src] <= 1) continue;
      const auto& prod = param.layer(src.first);
      l->set_bottom(b, l->bottom(b) + "_" + prod.name() + "_" + std::to_string(src.second) +
                           "_split_" + std::to_string(next_reader[src]++));
    }
    for (int t = 0; t < l->top_size(); ++t) {
      const int n = readers[{i, t}];
      if (n <= 1) continue;
      const std::string& blob = l->top(t);
      pb::LayerParameter split;
      split.set_name(blob + "_" + l->name() + "_" + std::to_string(t) + "_split");
      split.set_type("Split");
      split.add_bottom(blob);
      for (int k = 0; k < n; ++k)
        split.add_top(blob + "_" + l->name() + "_" + std::to_string(t) + "_split_" +
                      std::to_string(k));
      *out.add_layer() = split;
    }
  }
  return out;
}

namespace {
// Every bottom must be a top of an earlier layer. Checked before InsertSplits, with the file
// and line of the layer that reads it, and for a cycle (or layers out of order) the line of
// the later layer that makes it.
void CheckBottomsProduced(const pb::NetParameter& param, const NetSource& source) {
  std::set<std::string> produced;
  for (int i = 0; i < param.layer_size(); ++i) {
    const auto& l = param.layer(i);
    for (const auto& b : l.bottom()) {
      if (produced.count(b)) continue;
      std::string later;
      for (int j = i; j < param.layer_size() && later.empty(); ++j)
        for (const auto& t : param.layer(j).top())
          if (t == b) {
            later = param.layer(j).name();
            break;
          }
      if (later.empty()) {
        HS_FAIL() << source.Where(l.name()) << "layer '" << l.name() << "' (" << l.type()
                  << ") reads bottom '" << b << "', which no layer produces";
      }
      const std::string at = source.Where(later);
      HS_FAIL() << source.Where(l.name()) << "layer '" << l.name() << "' (" << l.type()
                << ") reads bottom '" << b << "' before it is made: layer '" << later << "'"
                << (at.empty() ? "" : " at " + at.substr(0, at.size() - 2))
                << " produces it later (a cycle, or layers out of order)";
    }
    for (const auto& t : l.top()) produced.insert(t);
  }
}

// A Data layer without its source takes a stand-in shape: an Input layer of
// options.input_shapes (the first top's shape, or its batch size for the other tops).
pb::LayerParameter StandInForData(const pb::LayerParameter& lp, const NetOptions& options) {
  static const std::set<std::string> kSourced = {"Data", "ImageData", "HDF5Data", "WindowData", "MemoryData"};
  if (!kSourced.count(lp.type()) || lp.top_size() == 0 || !options.input_shapes.count(lp.top(0))) return lp;
  const auto& shape0 = options.input_shapes.at(lp.top(0));
  pb::LayerParameter input;
  input.set_name(lp.name());
  input.set_type("Input");
  input.set_phase(lp.phase());
  for (int t = 0; t < lp.top_size(); ++t) {
    input.add_top(lp.top(t));
    auto it = options.input_shapes.find(lp.top(t));
    std::vector<int> s = it != options.input_shapes.end() ? it->second
                                                          : std::vector<int>{shape0.empty() ? 1 : shape0[0]};
    auto* bs = input.mutable_input_param()->add_shape();
    for (int d : s) bs->add_dim(d);
  }
  return input;
}
}  // namespace

Net::Net(const pb::NetParameter& param, const NetOptions& options) { Init(param, options); }

Net::~Net() {
  if (flat_data_ && own_data_) HostFree(flat_data_, flat_pinned_[0]);
  if (flat_diff_) HostFree(flat_diff_, flat_pinned_[1]);
}

void Net::Init(const pb::NetParameter& in_param, const NetOptions& options) {
  name_ = in_param.name();
  phase_ = options.phase;
  pb::NetState state;
  state.set_phase(options.phase);
  state.set_level(options.level);
  for (const auto& s : options.stages) state.add_stage(s);
  const pb::NetParameter filtered = FilterNet(UpgradeNetInputs(in_param), state);
  CheckBottomsProduced(filtered, options.source);
  pb::NetParameter param = InsertSplits(filtered);
  double need_bytes = 0;  // data and gradients of every blob so far, checked layer by layer

  std::set<std::string> available;  // produced, not yet consumed: the outputs at the end
  for (int li = 0; li < param.layer_size(); ++li) {
    pb::LayerParameter lp = param.layer(li);
    if (!lp.has_phase()) lp.set_phase(phase_);
    const std::string where = options.source.Where(lp.name());
    const std::string who = where + "layer '" + lp.name() + "' (" + lp.type() + "): ";
    lp = StandInForData(lp, options);
    const int layer_id = AddLayer(lp, where);
    bool need_backward = WireBottoms(layer_id, lp, who, &available);
    WireTops(layer_id, &lp, who, &available);
    need_backward |= SetUpLayer(layer_id, lp, who, &need_bytes);
    layer_need_backward_.push_back(need_backward);
    for (int id : top_ids_[layer_id]) blob_need_backward_[id] = blob_need_backward_[id] || need_backward;
  }
  ComputeBackwardNeeds(param);
  if (options.fuse) FuseLayers();
  CollectOutputs(available);
  blob_blocked_.assign(blobs_.size(), false);
  if (options.blocked && Context::Get().mode() == Mode::CPU) AssignLayouts();
  FlattenParams();
}

int Net::AddLayer(const pb::LayerParameter& lp, const std::string& where) {
  const int layer_id = static_cast<int>(layers_.size());
  try {
    layers_.push_back(CreateLayer(lp));
  } catch (const Error& e) {
    throw Error(where + e.what());
  }
  layer_names_.push_back(lp.name());
  layer_index_.emplace(lp.name(), layer_id);  // Caffe allows repeated names; first wins
  bottom_vecs_.emplace_back();
  top_vecs_.emplace_back();
  bottom_ids_.emplace_back();
  top_ids_.emplace_back();
  bottom_need_backward_.emplace_back();
  return layer_id;
}

bool Net::WireBottoms(int layer_id, const pb::LayerParameter& lp, const std::string& who,
                      std::set<std::string>* available) {
  bool need_backward = false;
  for (int b = 0; b < lp.bottom_size(); ++b) {
    auto it = blob_index_.find(lp.bottom(b));
    HS_REQUIRE(it != blob_index_.end() && available->count(lp.bottom(b)))
        << who << "unknown bottom blob '" << lp.bottom(b) << "'";
    const int id = it->second;
    bottom_vecs_[layer_id].push_back(blobs_[id].get());
    bottom_ids_[layer_id].push_back(id);
    bool nb = blob_need_backward_[id];
    if (b < lp.propagate_down_size()) nb = nb && lp.propagate_down(b);
    bottom_need_backward_[layer_id].push_back(nb);
    need_backward |= nb;
    available->erase(lp.bottom(b));
  }
  return need_backward;
}

void Net::WireTops(int layer_id, pb::LayerParameter* lp, const std::string& who, std::set<std::string>* available) {
  const Layer* layer = layers_[layer_id].get();
  int num_top = lp->top_size();
  if (layer->AutoTopBlobs()) {
    const int needed = std::max(layer->MinTopBlobs(), layer->ExactNumTopBlobs());
    for (; num_top < needed; ++num_top) lp->add_top("(" + lp->name() + ")." + std::to_string(num_top));
  }
  for (int t = 0; t < lp->top_size(); ++t) {
    const std::string& tn = lp->top(t);
    const bool in_place = t < lp->bottom_size() && lp->bottom(t) == tn;
    int id;
    if (in_place) {
      id = blob_index_.at(tn);
    } else {
      HS_REQUIRE(blob_index_.count(tn) == 0) << who << "top blob '" << tn << "' is produced by more than one layer";
      id = static_cast<int>(blobs_.size());
      blobs_.push_back(std::make_shared<Blob>());
      blob_names_.push_back(tn);
      blob_index_[tn] = id;
      blob_need_backward_.push_back(false);
      blob_loss_weights_.push_back(0.f);
      if (lp->type() == "Input") input_blobs_.push_back(blobs_[id].get());
    }
    top_vecs_[layer_id].push_back(blobs_[id].get());
    top_ids_[layer_id].push_back(id);
    available->insert(tn);
  }
}

bool Net::SetUpLayer(int layer_id, const pb::LayerParameter& lp, const std::string& who, double* need_bytes) {
  Layer* layer = layers_[layer_id].get();
  try {
    layer->SetUp(bottom_vecs_[layer_id], top_vecs_[layer_id]);
  } catch (const Error& e) {
    throw Error(who + e.what());
  }
  for (int t = 0; t < static_cast<int>(top_ids_[layer_id].size()); ++t)
    blob_loss_weights_[top_ids_[layer_id][t]] = layer->loss(t);

  // Parameters: sharing by name, lr/decay multipliers.
  const int num_params = static_cast<int>(layer->blobs().size());
  HS_REQUIRE(lp.param_size() <= num_params)
      << who << lp.param_size() << " param specs given but the layer has only " << num_params
      << " parameter blob(s)";
  bool need_backward = false;
  for (int p = 0; p < num_params; ++p) {
    // A blob the layer declared fixed (BatchNorm's statistics) stays fixed.
    const bool fixed = !layer->param_propagate_down(p);
    const bool learn = !fixed && (p >= lp.param_size() || lp.param(p).lr_mult() != 0.f);
    layer->set_param_propagate_down(p, learn);
    need_backward |= learn;
  }
  const size_t learnable_before = learnable_params_.size();
  try {
    AppendParams(layer_id);
  } catch (const Error& e) {
    throw Error(who + e.what());
  }
  // Blobs take memory lazily, at first use: add up what this layer's new tops and
  // parameters will take, with their gradients, and stop before the first Forward would be
  // killed for it.
  for (int t = 0; t < static_cast<int>(top_ids_[layer_id].size()); ++t) {
    const bool in_place = t < lp.bottom_size() && lp.bottom(t) == lp.top(t);
    if (!in_place) *need_bytes += 2.0 * sizeof(float) * top_vecs_[layer_id][t]->count();
  }
  for (size_t p = learnable_before; p < learnable_params_.size(); ++p)
    *need_bytes += 2.0 * sizeof(float) * learnable_params_[p]->count();
  try {
    RequireMemory(*need_bytes, "the net's blobs up to here, with their gradients,");
  } catch (const Error& e) {
    throw Error(who + e.what());
  }
  return need_backward;
}

void Net::CollectOutputs(const std::set<std::string>& available) {
  for (const auto& name : available) {
    const int id = blob_index_.at(name);
    output_blobs_.push_back(blobs_[id].get());
    output_blob_ids_.push_back(id);
  }
  // Keep the outputs in net order (a set sorts by name).
  std::vector<std::pair<int, Blob*>> order;
  for (size_t i = 0; i < output_blob_ids_.size(); ++i) order.push_back({output_blob_ids_[i], output_blobs_[i]});
  std::sort(order.begin(), order.end());
  for (size_t i = 0; i < order.size(); ++i) {
    output_blob_ids_[i] = order[i].first;
    output_blobs_[i] = order[i].second;
  }
}

void Net::AppendParams(int layer_id) {
  const pb::LayerParameter& lp = layers_[layer_id]->layer_param();
  auto& lblobs = layers_[layer_id]->blobs();
  for (int p = 0; p < static_cast<int>(lblobs.size()); ++p) {
    const pb::ParamSpec spec = p < lp.param_size() ? lp.param(p) : pb::ParamSpec();
    const int id = static_cast<int>(params_.size());
    params_.push_back(lblobs[p]);
    param_layer_indices_.push_back({layer_id, p});
    std::string name = spec.name();
    param_display_names_.push_back(name.empty() ? std::to_string(id) : name);
    if (name.empty() || param_names_.count(name) == 0) {
      if (!name.empty()) param_names_[name] = id;
      param_owners_.push_back(id);
      learnable_params_.push_back(lblobs[p].get());
      // Not learning means lr_mult 0 or a blob the layer keeps fixed: the solver skips it.
      const bool learn = layers_[layer_id]->param_propagate_down(p);
      params_lr_.push_back(learn ? spec.lr_mult() : 0.f);
      params_decay_.push_back(learn ? spec.decay_mult() : 0.f);
      continue;
    }
    // Shared: the first layer to name the param owns it.
    const int owner = param_names_.at(name);
    param_owners_.push_back(owner);
    const Blob& ob = *params_[owner];
    if (spec.share_mode() == pb::ParamSpec::PERMISSIVE) {
      HS_REQUIRE(ob.count() == lblobs[p]->count())
          << "shared param '" << name << "' has " << lblobs[p]->count() << " values here but "
          << ob.count() << " in its owner";
    } else {
      HS_REQUIRE(ob.shape() == lblobs[p]->shape())
          << "shared param '" << name << "' has shape " << lblobs[p]->shape_string()
          << " here but " << ob.shape_string() << " in its owner (share_mode: PERMISSIVE "
          << "allows equal counts)";
    }
    // The owner's multipliers apply; a sharer may set them only if they agree.
    int learnable_id = static_cast<int>(
        std::find(learnable_params_.begin(), learnable_params_.end(), &ob) - learnable_params_.begin());
    if (spec.has_lr_mult()) {
      HS_REQUIRE(params_lr_[learnable_id] == spec.lr_mult())
          << "shared param '" << name << "' given two different lr_mult values";
    }
    if (spec.has_decay_mult()) {
      HS_REQUIRE(params_decay_[learnable_id] == spec.decay_mult())
          << "shared param '" << name << "' given two different decay_mult values";
    }
  }
}

void Net::FlattenParams() {
  learnable_offsets_.clear();
  size_t total = 0;
  num_learnable_ = 0;
  for (Blob* b : learnable_params_) {
    learnable_offsets_.push_back(total);
    total += AlignUp(b->count());
    num_learnable_ += b->count();
  }
  flat_size_ = total;
  flat_data_ = static_cast<float*>(HostAlloc(std::max<size_t>(total, 1) * sizeof(float), &flat_pinned_[0]));
  flat_diff_ = static_cast<float*>(HostAlloc(std::max<size_t>(total, 1) * sizeof(float), &flat_pinned_[1]));
  std::memset(flat_data_, 0, total * sizeof(float));
  std::memset(flat_diff_, 0, total * sizeof(float));
  for (size_t i = 0; i < learnable_params_.size(); ++i) {
    Blob* b = learnable_params_[i];
    float* d = flat_data_ + learnable_offsets_[i];
    std::memcpy(d, b->cpu_data(), b->count() * sizeof(float));
    b->set_cpu_data(d);
    b->set_cpu_diff(flat_diff_ + learnable_offsets_[i]);
  }
  // Sharers point at their owner's memory (after the owners moved into the buffer).
  for (size_t i = 0; i < params_.size(); ++i) {
    if (param_owners_[i] == static_cast<int>(i)) continue;
    params_[i]->ShareData(*params_[param_owners_[i]]);
    params_[i]->ShareDiff(*params_[param_owners_[i]]);
  }
}

void Net::ComputeBackwardNeeds(const pb::NetParameter& param) {
  // Walk back from the losses: a layer that feeds no loss needs no backward, and a bottom
  // whose gradient nobody wants is skipped.
  std::set<std::string> under_loss, skip;
  for (int i = static_cast<int>(layers_.size()) - 1; i >= 0; --i) {
    bool contributes = false, all_skip = true;
    for (size_t t = 0; t < top_ids_[i].size(); ++t) {
      const std::string& n = blob_names_[top_ids_[i][t]];
      if (layers_[i]->loss(static_cast<int>(t)) != 0.f || under_loss.count(n)) contributes = true;
      if (!skip.count(n)) all_skip = false;
    }
    if (layer_need_backward_[i] && all_skip && !top_ids_[i].empty()) {
      layer_need_backward_[i] = false;
      std::fill(bottom_need_backward_[i].begin(), bottom_need_backward_[i].end(), false);
    }
    if (!contributes) layer_need_backward_[i] = false;
    for (size_t b = 0; b < bottom_ids_[i].size(); ++b) {
      const std::string& n = blob_names_[bottom_ids_[i][b]];
      if (contributes) {
        under_loss.insert(n);
      } else {
        bottom_need_backward_[i][b] = false;
      }
      if (!bottom_need_backward_[i][b]) skip.insert(n);
    }
  }
  if (param.force_backward()) {
    for (size_t i = 0; i < layers_.size(); ++i) {
      layer_need_backward_[i] = true;
      for (size_t b = 0; b < bottom_ids_[i].size(); ++b) {
        const bool allow = layers_[i]->AllowForceBackward(static_cast<int>(b));
        bottom_need_backward_[i][b] = bottom_need_backward_[i][b] || allow;
        blob_need_backward_[bottom_ids_[i][b]] = blob_need_backward_[bottom_ids_[i][b]] || allow;
      }
      for (size_t p = 0; p < layers_[i]->blobs().size(); ++p)
        layers_[i]->set_param_propagate_down(static_cast<int>(p), true);
    }
  }
}

// BatchNorm -> Scale (-> ReLU), one after the other on one blob, all in place, the Scale one
// learned value per channel, the ReLU plain (negative_slope 0), no loss weight on the blob:
// nothing else sees the blob between them, so the BatchNorm can run the chain's passes (the
// Scale and ReLU keep their blobs and run only what the BatchNorm cannot: the Scale's
// gradients).
void Net::FuseLayers() {
  const int n = static_cast<int>(layers_.size());
  auto on = [&](int i, Blob* b) {
    return i < n && bottom_vecs_[i].size() == 1 && top_vecs_[i].size() == 1 &&
           bottom_vecs_[i][0] == b && top_vecs_[i][0] == b && layers_[i]->loss(0) == 0.f;
  };
  for (int i = 0; i + 1 < n; ++i) {
    auto* bn = dynamic_cast<BatchNormLayer*>(layers_[i].get());
    auto* scale = dynamic_cast<ScaleLayer*>(layers_[i + 1].get());
    if (!bn || !scale || bottom_vecs_[i].empty()) continue;
    Blob* b = bottom_vecs_[i][0];
    if (!on(i, b) || !on(i + 1, b) || !scale->PerChannelOf(*b)) continue;
    auto* relu = i + 2 < n ? dynamic_cast<ReLULayer*>(layers_[i + 2].get()) : nullptr;
    if (relu && (!on(i + 2, b) || relu->layer_param().relu_param().negative_slope() != 0.f))
      relu = nullptr;
    bn->FuseScale(scale, relu, layer_need_backward_[i] || layer_need_backward_[i + 1]);
  }
}

// Blobs joined by kAny layers (an element-by-element layer reads and writes one layout; a
// Split's tops share its bottom's memory) must share a layout: a union-find over blob ids
// puts each such group in one set. A set is blocked when every blob in it has 4 axes and
// channels in blocks of 16, and no kPlain layer, input or output of the net, or loss weight
// touches any of them; kEach layers (oneDNN convolutions) take either on each side. In
// ResNet-20 that is every blob from the first convolution on, but the last stage's residual
// stream, which meets the global pooling: the convolutions' reorders of activations and
// gradients went from 14.6 to 1.1 ms per pass (CIFAR, batch 64, oneDNN's verbose log).
void Net::AssignLayouts() {
  const int nb = static_cast<int>(blobs_.size());
  std::vector<int> parent(nb);
  for (int b = 0; b < nb; ++b) parent[b] = b;
  auto find = [&](int b) {
    while (parent[b] != b) b = parent[b] = parent[parent[b]];
    return b;
  };
  std::vector<bool> plain(nb, false);
  for (int b = 0; b < nb; ++b) {
    const Blob& blob = *blobs_[b];
    plain[b] = blob.num_axes() != 4 || blob.shape(1) % 16 != 0 || blob_loss_weights_[b] != 0.f;
  }
  for (int id : output_blob_ids_) plain[id] = true;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer::Layouts kind = layers_[i]->LayoutSupport();
    std::vector<int> ids = bottom_ids_[i];
    ids.insert(ids.end(), top_ids_[i].begin(), top_ids_[i].end());
    if (kind == Layer::Layouts::kPlain) {
      for (int id : ids) plain[id] = true;
    } else if (kind == Layer::Layouts::kAny) {
      for (size_t k = 1; k < ids.size(); ++k) parent[find(ids[k])] = find(ids[0]);
    }
  }
  // A set turned NCHW may leave a BlockedOutNeedsBlockedIn layer reading NCHW: its tops' sets
  // go NCHW too, until nothing changes.
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<bool> set_plain(nb, false);
    for (int b = 0; b < nb; ++b) set_plain[find(b)] = set_plain[find(b)] || plain[b];
    for (int b = 0; b < nb; ++b) blob_blocked_[b] = !set_plain[find(b)];
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (!layers_[i]->BlockedOutNeedsBlockedIn()) continue;
      const bool in = std::all_of(bottom_ids_[i].begin(), bottom_ids_[i].end(),
                                  [&](int id) { return blob_blocked_[id]; });
      for (int id : top_ids_[i]) {
        if (!in && blob_blocked_[id]) plain[id] = changed = true;
      }
    }
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i]->LayoutSupport() == Layer::Layouts::kPlain) continue;
    std::vector<bool> bottom, top;
    for (int id : bottom_ids_[i]) bottom.push_back(blob_blocked_[id]);
    for (int id : top_ids_[i]) top.push_back(blob_blocked_[id]);
    const bool any = std::find(bottom.begin(), bottom.end(), true) != bottom.end() ||
                     std::find(top.begin(), top.end(), true) != top.end();
    if (any) layers_[i]->SetBlocked(bottom, top);
  }
}

float Net::ForwardFromTo(int start, int end) {
  HS_CHECK(start >= 0 && end < static_cast<int>(layers_.size()));
  float loss = 0;
  for (int i = start; i <= end; ++i) loss += layers_[i]->Forward(bottom_vecs_[i], top_vecs_[i]);
  return loss;
}

float Net::Forward() { return layers_.empty() ? 0.f : ForwardFromTo(0, static_cast<int>(layers_.size()) - 1); }

void Net::BackwardFromTo(int start, int end) {
  HS_CHECK(start < static_cast<int>(layers_.size()) && end >= 0);
  for (int i = start; i >= end; --i)
    if (layer_need_backward_[i]) layers_[i]->Backward(top_vecs_[i], bottom_need_backward_[i], bottom_vecs_[i]);
}

void Net::Backward() {
  if (!layers_.empty()) BackwardFromTo(static_cast<int>(layers_.size()) - 1, 0);
}

void Net::ClearParamDiffs() {
  // Gradients that live on the device are zeroed there alone: the host copy is read (and so
  // downloaded) only by a host update. Zeroing CaffeNet's 244 MB on the host as well cost
  // 16 ms an iteration on an H200 machine, as long as the forward and backward passes together.
  bool device_only = Context::Get().mode() == Mode::GPU && !learnable_params_.empty();
  for (Blob* p : learnable_params_) device_only = device_only && p->diff()->on_device();
  if (device_only) {
    for (Blob* p : learnable_params_) p->diff()->device_zero();
    return;
  }
  std::memset(flat_diff_, 0, flat_size_ * sizeof(float));
  // In GPU mode the gradients live on the device between passes: zero them there too.
  for (Blob* p : learnable_params_) p->diff()->host_zeroed();
}

void Net::Reshape() {
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->Reshape(bottom_vecs_[i], top_vecs_[i]);
}

std::shared_ptr<Blob> Net::blob_by_name(const std::string& name) const {
  auto it = blob_index_.find(name);
  return it == blob_index_.end() ? nullptr : blobs_[it->second];
}

Layer* Net::layer_by_name(const std::string& name) const {
  auto it = layer_index_.find(name);
  return it == layer_index_.end() ? nullptr : layers_[it->second].get();
}

void Net::UseParamBuffer(float* external, bool copy_in) {
  HS_CHECK(external != nullptr);
  if (copy_in) std::memcpy(external, flat_data_, flat_size_ * sizeof(float));
  // Redirect, not replace, the params' memory: sharers (this net's shared params, test nets
  // built with ShareWeightsFrom) follow.
  for (size_t i = 0; i < learnable_params_.size(); ++i)
    learnable_params_[i]->redirect_cpu_data(external + learnable_offsets_[i]);
  if (own_data_) HostFree(flat_data_, flat_pinned_[0]);
  flat_data_ = external;
  own_data_ = false;
}

void Net::UseDeviceParamBuffer(float* device) {
  HS_CHECK(device != nullptr);
  // Redirect the params' own memory: sharers (test nets built with ShareWeightsFrom) follow.
  for (size_t i = 0; i < learnable_params_.size(); ++i)
    learnable_params_[i]->data()->set_gpu_data(device + learnable_offsets_[i]);
  flat_device_ = device;
}

void Net::DeviceParamsWritten() {
  for (Blob* p : learnable_params_) p->data()->device_written();
}

void Net::ShareWeightsFrom(const Net& other) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer* src = other.layer_by_name(layer_names_[i]);
    if (!src) continue;
    auto& dst = layers_[i]->blobs();
    HS_REQUIRE(dst.size() == src->blobs().size())
        << "layer '" << layer_names_[i] << "' has " << dst.size() << " blob(s) here and "
        << src->blobs().size() << " in the net it shares with";
    for (size_t b = 0; b < dst.size(); ++b) {
      HS_REQUIRE(dst[b]->shape() == src->blobs()[b]->shape())
          << "layer '" << layer_names_[i] << "' blob " << b << " has shape "
          << dst[b]->shape_string() << " here and " << src->blobs()[b]->shape_string()
          << " in the net it shares with";
      dst[b]->ShareData(*src->blobs()[b]);
    }
  }
}

void Net::CopyTrainedLayersFrom(const pb::NetParameter& trained, const std::string& source) {
  // A 0-byte file and a .solverstate both parse as a NetParameter without layers; loading
  // them used to "succeed" and train from random weights.
  HS_REQUIRE(trained.layer_size() > 0)
      << source << " holds no layers (is it a .caffemodel?)";
  std::set<std::string> loaded;
  std::string unmatched;  // weight layers this net does not have, for the message
  for (const auto& src : trained.layer()) {
    if (src.blobs_size() == 0) continue;
    Layer* layer = layer_by_name(src.name());
    if (!layer) {
      unmatched += (unmatched.empty() ? "'" : ", '") + src.name() + "'";
      continue;
    }
    auto& dst = layer->blobs();
    HS_REQUIRE(static_cast<int>(dst.size()) == src.blobs_size())
        << source << ": layer '" << src.name() << "': the weights file has " << src.blobs_size()
        << " blob(s), the net expects " << dst.size();
    for (int i = 0; i < src.blobs_size(); ++i) {
      try {
        dst[i]->FromProto(src.blobs(i), /*reshape=*/false);
      } catch (const Error& e) {
        throw Error(source + ": layer '" + src.name() + "' blob " + std::to_string(i) + ": " +
                    e.what());
      }
    }
    loaded.insert(src.name());
  }
  std::vector<std::string> learnable;  // layers with parameters, in net order
  for (size_t i = 0; i < layers_.size(); ++i)
    if (!layers_[i]->blobs().empty()) learnable.push_back(layer_names_[i]);
  if (!learnable.empty() && loaded.empty()) {
    std::string want;
    for (const auto& n : learnable) want += (want.empty() ? "'" : ", '") + n + "'";
    HS_FAIL() << source << ": no layer with weights matches a layer of net '" << name_
              << "' by name (the file has " << (unmatched.empty() ? "none" : unmatched)
              << "; the net wants " << want << ")";
  }
  for (const auto& n : learnable)
    if (!loaded.count(n))
      LOG(WARNING) << "Layer '" << n << "' has parameters but " << source
                   << " holds none for it: it keeps its initial values";
  if (!unmatched.empty())
    LOG(INFO) << "Ignoring layers of " << source << " that the net does not have: " << unmatched;
  LOG(INFO) << "Loaded weights for " << loaded.size() << " of " << learnable.size()
            << " layers with parameters from " << source;
}

void Net::CopyTrainedLayersFromFiles(const std::string& files) {
  std::stringstream ss(files);
  for (std::string file; std::getline(ss, file, ',');) {
    if (file.empty()) continue;
    pb::NetParameter weights;
    ReadBinaryProto(file, &weights);
    CopyTrainedLayersFrom(weights, file);
  }
}

std::vector<double> Net::ForwardMean(int passes, double* mean_loss,
                                     const std::function<void(int, double)>& on_pass) {
  HS_REQUIRE(passes > 0) << "the number of passes must be > 0";
  std::vector<double> sums;
  double loss = 0;
  for (int i = 0; i < passes; ++i) {
    loss += Forward();
    size_t k = 0;
    for (const Blob* b : output_blobs_)
      for (int j = 0; j < b->count(); ++j, ++k) {
        if (sums.size() <= k) sums.push_back(0);
        sums[k] += b->cpu_data()[j];
      }
    if (on_pass) on_pass(i, loss / (i + 1));
  }
  for (double& v : sums) v /= passes;
  if (mean_loss) *mean_loss = loss / passes;
  return sums;
}

void Net::ToProto(pb::NetParameter* param, bool write_diff) const {
  param->Clear();
  param->set_name(name_);
  for (size_t i = 0; i < layers_.size(); ++i) {
    pb::LayerParameter* lp = param->add_layer();
    *lp = layers_[i]->layer_param();
    lp->clear_blobs();
    for (const auto& b : layers_[i]->blobs()) b->ToProto(lp->add_blobs(), write_diff);
  }
}

std::vector<OutputSlot> CaffeOutputOrder(const Net& net) {
  std::vector<OutputSlot> slots;
  size_t flat = 0;
  for (size_t j = 0; j < net.output_blobs().size(); ++j) {
    const int id = net.output_blob_indices()[j];
    const Blob* b = net.output_blobs()[j];
    for (int e = 0; e < b->count(); ++e)
      slots.push_back({net.blob_names()[id], b, e, flat++, net.blob_loss_weight(id)});
  }
  // Stable: the elements of one blob keep their order, as in Caffe.
  std::stable_sort(slots.begin(), slots.end(),
                   [](const OutputSlot& a, const OutputSlot& b) { return a.name < b.name; });
  return slots;
}

}  // namespace hogstream
