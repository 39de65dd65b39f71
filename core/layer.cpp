#include "core/layer.hpp"

#include <algorithm>
#include <mutex>

#include "core/context.hpp"
#include "core/math.hpp"

namespace hogstream {

Layer::Layer(const pb::LayerParameter& param) : param_(param), phase_(param.phase()) {
  // Blobs given in the layer parameter (a net built from a snapshot) are loaded at SetUp by
  // the Net, which knows the expected shapes.
}

void Layer::SetUp(const Blobs& bottom, const Blobs& top) {
  CheckBlobCounts(bottom, top);
  LayerSetUp(bottom, top);
  Reshape(bottom, top);
  SetLossWeights(top);
}

float Layer::Forward(const Blobs& bottom, const Blobs& top) {
  Reshape(bottom, top);
  if (Context::Get().mode() == Mode::GPU) {
    Forward_gpu(bottom, top);
  } else {
    Forward_cpu(bottom, top);
  }
  float total = 0;
  for (size_t t = 0; t < top.size(); ++t) {
    if (loss(static_cast<int>(t)) == 0.f) continue;
    // The top's diff holds its loss weight, set in SetLossWeights; the Net keeps loss tops'
    // diffs untouched between passes.
    total += dot(top[t]->count(), top[t]->cpu_data(), top[t]->cpu_diff());
  }
  FinishForward();
  return total;
}

void Layer::Backward(const Blobs& top, const std::vector<bool>& propagate_down,
                     const Blobs& bottom) {
  if (Context::Get().mode() == Mode::GPU) {
    Backward_gpu(top, propagate_down, bottom);
  } else {
    Backward_cpu(top, propagate_down, bottom);
  }
}

void Layer::set_loss(int top_index, float value) {
  if (static_cast<int>(loss_.size()) <= top_index) loss_.resize(top_index + 1, 0.f);
  loss_[top_index] = value;
}

void Layer::set_param_propagate_down(int i, bool value) {
  if (static_cast<int>(param_propagate_down_.size()) <= i)
    param_propagate_down_.resize(i + 1, true);
  param_propagate_down_[i] = value;
}

void Layer::CheckBlobCounts(const Blobs& bottom, const Blobs& top) const {
  const int nb = static_cast<int>(bottom.size()), nt = static_cast<int>(top.size());
  if (ExactNumBottomBlobs() >= 0)
    HS_REQUIRE(nb == ExactNumBottomBlobs())
        << "takes " << ExactNumBottomBlobs() << " bottom blob(s), got " << nb;
  if (MinBottomBlobs() >= 0)
    HS_REQUIRE(nb >= MinBottomBlobs()) << "takes at least " << MinBottomBlobs()
                                       << " bottom blob(s), got " << nb;
  if (MaxBottomBlobs() >= 0)
    HS_REQUIRE(nb <= MaxBottomBlobs()) << "takes at most " << MaxBottomBlobs()
                                       << " bottom blob(s), got " << nb;
  if (ExactNumTopBlobs() >= 0)
    HS_REQUIRE(nt == ExactNumTopBlobs())
        << "produces " << ExactNumTopBlobs() << " top blob(s), got " << nt;
  if (MinTopBlobs() >= 0)
    HS_REQUIRE(nt >= MinTopBlobs()) << "produces at least " << MinTopBlobs()
                                    << " top blob(s), got " << nt;
  if (MaxTopBlobs() >= 0)
    HS_REQUIRE(nt <= MaxTopBlobs()) << "produces at most " << MaxTopBlobs()
                                    << " top blob(s), got " << nt;
  if (EqualNumBottomTopBlobs())
    HS_REQUIRE(nb == nt) << "needs as many tops as bottoms, got " << nb << " and " << nt;
}

void Layer::SetLossWeights(const Blobs& top) {
  if (param_.loss_weight_size() == 0 && IsLoss()) {
    // Loss layers weigh their first top by 1 unless told otherwise.
    for (size_t t = 0; t < top.size(); ++t) param_.add_loss_weight(t == 0 ? 1.f : 0.f);
  }
  const int n = param_.loss_weight_size();
  if (n == 0) return;
  HS_REQUIRE(n == static_cast<int>(top.size()))
      << "has " << n << " loss_weight value(s) but " << top.size() << " top(s)";
  for (int t = 0; t < n; ++t) {
    const float w = param_.loss_weight(t);
    if (w == 0.f) continue;
    set_loss(t, w);
    set(top[t]->count(), w, top[t]->mutable_cpu_diff());
  }
}

// ---------------------------------------------------------------- registry

namespace {
std::map<std::string, LayerFactory>& Registry() {
  static std::map<std::string, LayerFactory> registry;
  return registry;
}
std::map<std::string, LayerFactory>& GpuRegistry() {
  static std::map<std::string, LayerFactory> registry;
  return registry;
}
std::mutex& RegistryMutex() {
  static std::mutex m;
  return m;
}
}  // namespace

void RegisterGpuLayer(const std::string& type, LayerFactory factory) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  HS_CHECK(GpuRegistry().count(type) == 0) << "GPU layer type " << type << " registered twice";
  GpuRegistry()[type] = std::move(factory);
}

std::vector<std::string> GpuLayerTypeList() {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  std::vector<std::string> names;
  for (auto& kv : GpuRegistry()) names.push_back(kv.first);
  return names;
}

void RegisterLayer(const std::string& type, LayerFactory factory) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  HS_CHECK(Registry().count(type) == 0) << "layer type " << type << " registered twice";
  Registry()[type] = std::move(factory);
}

bool LayerTypeKnown(const std::string& type) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  return Registry().count(type) > 0;
}

std::vector<std::string> LayerTypeList() {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  std::vector<std::string> names;
  for (auto& kv : Registry()) names.push_back(kv.first);
  return names;
}

std::unique_ptr<Layer> CreateLayer(const pb::LayerParameter& param) {
  LayerFactory factory;
  const bool gpu = Context::Get().mode() == Mode::GPU;
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    auto it = Registry().find(param.type());
    if (it != Registry().end()) factory = it->second;
    // In GPU mode the GPU twin, where the GPU engine has one (it derives from the CPU class
    // and overrides the _gpu passes).
    auto g = GpuRegistry().find(param.type());
    if (gpu && factory && g != GpuRegistry().end()) factory = g->second;
  }
  if (!factory) {
    std::string known;
    for (auto& n : LayerTypeList()) known += (known.empty() ? "" : ", ") + n;
    HS_FAIL() << "layer '" << param.name() << "' has unknown type '" << param.type()
              << "' (hogstream knows: " << known << ")";
  }
  return factory(param);
}

void Layer::CheckLabel(float label, int l, int classes, int item, int position, bool spatial) const {
  HS_REQUIRE(l >= 0 && l < classes)
      << "layer '" << param_.name() << "' (" << param_.type() << "): label " << label
      << " at item " << item << (spatial ? ", position " + std::to_string(position) : std::string())
      << " of the batch is out of range for " << classes << " classes [0, " << classes << ")";
}

}  // namespace hogstream
