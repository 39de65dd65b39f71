#include "core/upgrade.hpp"

#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "base/common.hpp"
#include "core/io.hpp"

namespace hogstream {

namespace gp = google::protobuf;
using V1 = pb::V1LayerParameter;

namespace {

// The current type name of each V1 enum value.
const std::map<V1::LayerType, const char*>& V1TypeNames() {
  static const std::map<V1::LayerType, const char*> names = {
      {V1::ABSVAL, "AbsVal"},
      {V1::ACCURACY, "Accuracy"},
      {V1::ARGMAX, "ArgMax"},
      {V1::BNLL, "BNLL"},
      {V1::CONCAT, "Concat"},
      {V1::CONTRASTIVE_LOSS, "ContrastiveLoss"},
      {V1::CONVOLUTION, "Convolution"},
      {V1::DATA, "Data"},
      {V1::DECONVOLUTION, "Deconvolution"},
      {V1::DROPOUT, "Dropout"},
      {V1::DUMMY_DATA, "DummyData"},
      {V1::EUCLIDEAN_LOSS, "EuclideanLoss"},
      {V1::ELTWISE, "Eltwise"},
      {V1::EXP, "Exp"},
      {V1::FLATTEN, "Flatten"},
      {V1::HDF5_DATA, "HDF5Data"},
      {V1::HDF5_OUTPUT, "HDF5Output"},
      {V1::HINGE_LOSS, "HingeLoss"},
      {V1::IM2COL, "Im2col"},
      {V1::IMAGE_DATA, "ImageData"},
      {V1::INFOGAIN_LOSS, "InfogainLoss"},
      {V1::INNER_PRODUCT, "InnerProduct"},
      {V1::LRN, "LRN"},
      {V1::MEMORY_DATA, "MemoryData"},
      {V1::MULTINOMIAL_LOGISTIC_LOSS, "MultinomialLogisticLoss"},
      {V1::MVN, "MVN"},
      {V1::POOLING, "Pooling"},
      {V1::POWER, "Power"},
      {V1::RELU, "ReLU"},
      {V1::SIGMOID, "Sigmoid"},
      {V1::SIGMOID_CROSS_ENTROPY_LOSS, "SigmoidCrossEntropyLoss"},
      {V1::SILENCE, "Silence"},
      {V1::SOFTMAX, "Softmax"},
      {V1::SOFTMAX_LOSS, "SoftmaxWithLoss"},
      {V1::SPLIT, "Split"},
      {V1::SLICE, "Slice"},
      {V1::TANH, "TanH"},
      {V1::WINDOW_DATA, "WindowData"},
      {V1::THRESHOLD, "Threshold"},
  };
  return names;
}

// The V1 enum of each V0 type string ("padding" is folded away before this is asked).
const std::map<std::string, V1::LayerType>& V0Types() {
  static const std::map<std::string, V1::LayerType> types = {
      {"accuracy", V1::ACCURACY},
      {"bnll", V1::BNLL},
      {"concat", V1::CONCAT},
      {"conv", V1::CONVOLUTION},
      {"data", V1::DATA},
      {"dropout", V1::DROPOUT},
      {"euclidean_loss", V1::EUCLIDEAN_LOSS},
      {"flatten", V1::FLATTEN},
      {"hdf5_data", V1::HDF5_DATA},
      {"hdf5_output", V1::HDF5_OUTPUT},
      {"im2col", V1::IM2COL},
      {"images", V1::IMAGE_DATA},
      {"infogain_loss", V1::INFOGAIN_LOSS},
      {"innerproduct", V1::INNER_PRODUCT},
      {"lrn", V1::LRN},
      {"multinomial_logistic_loss", V1::MULTINOMIAL_LOGISTIC_LOSS},
      {"pool", V1::POOLING},
      {"relu", V1::RELU},
      {"sigmoid", V1::SIGMOID},
      {"softmax", V1::SOFTMAX},
      {"softmax_loss", V1::SOFTMAX_LOSS},
      {"split", V1::SPLIT},
      {"tanh", V1::TANH},
      {"window_data", V1::WINDOW_DATA},
  };
  return types;
}

// V0 padding layers: each convolution that reads one's output reads its input instead and
// pads by its amount (added to any padding of its own). Returns the indices of the entries
// kept, in order.
std::vector<int> FoldV0Padding(pb::NetParameter* net,
                               const std::function<std::string(int)>& where) {
  std::map<std::string, int> padded;  // a padding layer's top -> its entry, while current
  std::vector<int> kept;
  for (int i = 0; i < net->layers_size(); ++i) {
    V1* e = net->mutable_layers(i);
    if (!e->has_layer()) {
      for (const auto& t : e->top()) padded.erase(t);
      kept.push_back(i);
      continue;
    }
    pb::V0LayerParameter* v0 = e->mutable_layer();
    if (v0->type() == "padding") {
      HS_REQUIRE(e->bottom_size() == 1 && e->top_size() == 1)
          << where(i) << "V0 padding layer '" << v0->name() << "' has " << e->bottom_size()
          << " bottom(s) and " << e->top_size() << " top(s); it needs one of each";
      padded[e->top(0)] = i;
      continue;
    }
    for (int b = 0; b < e->bottom_size(); ++b) {
      auto it = padded.find(e->bottom(b));
      if (it == padded.end()) continue;
      const V1& pad = net->layers(it->second);
      HS_REQUIRE(v0->type() == "conv")
          << where(i) << "V0 layer '" << v0->name() << "' (type '" << v0->type()
          << "') reads padding layer '" << pad.layer().name()
          << "'; only a convolution can take over its padding";
      v0->set_pad(v0->pad() + pad.layer().pad());
      e->set_bottom(b, pad.bottom(0));
    }
    for (const auto& t : e->top()) padded.erase(t);
    kept.push_back(i);
  }
  return kept;
}

// One V0 layer (inside its V1 wrapper, which holds the bottoms and tops) as a V1 layer.
V1 FromV0(const V1& wrapper, const std::string& where) {
  const pb::V0LayerParameter& v0 = wrapper.layer();
  const std::string& t = v0.type();
  const std::string& name = v0.name();
  auto type = V0Types().find(t);
  HS_REQUIRE(type != V0Types().end())
      << where << "V0 layer '" << name << "' has unknown type '" << t << "'";
  V1 v1;
  *v1.mutable_bottom() = wrapper.bottom();
  *v1.mutable_top() = wrapper.top();
  if (v0.has_name()) v1.set_name(name);
  v1.set_type(type->second);
  *v1.mutable_blobs() = v0.blobs();
  *v1.mutable_blobs_lr() = v0.blobs_lr();
  *v1.mutable_weight_decay() = v0.weight_decay();

  // Each flat V0 setting belongs to certain types; `for_types` says whether this layer takes
  // the setting (false: not given), and fails when it is given to any other type.
  auto for_types = [&](bool given, const char* field, std::initializer_list<const char*> types) {
    if (!given) return false;
    for (const char* ok : types)
      if (t == ok) return true;
    HS_FAIL() << where << "V0 layer '" << name << "' (type '" << t << "'): hogstream has no "
              << "place for its '" << field << "'";
  };
  const bool conv = t == "conv";
  auto weight_filler = [&] {
    return conv ? v1.mutable_convolution_param()->mutable_weight_filler()
                : v1.mutable_inner_product_param()->mutable_weight_filler();
  };
  auto bias_filler = [&] {
    return conv ? v1.mutable_convolution_param()->mutable_bias_filler()
                : v1.mutable_inner_product_param()->mutable_bias_filler();
  };
  if (for_types(v0.has_num_output(), "num_output", {"conv", "innerproduct"})) {
    if (conv) v1.mutable_convolution_param()->set_num_output(v0.num_output());
    else v1.mutable_inner_product_param()->set_num_output(v0.num_output());
  }
  if (for_types(v0.has_biasterm(), "biasterm", {"conv", "innerproduct"})) {
    if (conv) v1.mutable_convolution_param()->set_bias_term(v0.biasterm());
    else v1.mutable_inner_product_param()->set_bias_term(v0.biasterm());
  }
  if (for_types(v0.has_weight_filler(), "weight_filler", {"conv", "innerproduct"}))
    *weight_filler() = v0.weight_filler();
  if (for_types(v0.has_bias_filler(), "bias_filler", {"conv", "innerproduct"}))
    *bias_filler() = v0.bias_filler();
  if (for_types(v0.has_pad() && v0.pad() != 0, "pad", {"conv"}))
    v1.mutable_convolution_param()->add_pad(v0.pad());
  if (for_types(v0.has_kernelsize(), "kernelsize", {"conv", "pool"})) {
    if (conv) v1.mutable_convolution_param()->add_kernel_size(v0.kernelsize());
    else v1.mutable_pooling_param()->set_kernel_size(v0.kernelsize());
  }
  if (for_types(v0.has_group(), "group", {"conv"}))
    v1.mutable_convolution_param()->set_group(v0.group());
  if (for_types(v0.has_stride(), "stride", {"conv", "pool"})) {
    if (conv) v1.mutable_convolution_param()->add_stride(v0.stride());
    else v1.mutable_pooling_param()->set_stride(v0.stride());
  }
  if (for_types(v0.has_pool(), "pool", {"pool"}))
    v1.mutable_pooling_param()->set_pool(
        static_cast<pb::PoolingParameter::PoolMethod>(v0.pool()));
  if (for_types(v0.has_dropout_ratio(), "dropout_ratio", {"dropout"}))
    v1.mutable_dropout_param()->set_dropout_ratio(v0.dropout_ratio());
  if (for_types(v0.has_local_size(), "local_size", {"lrn"}))
    v1.mutable_lrn_param()->set_local_size(v0.local_size());
  if (for_types(v0.has_alpha(), "alpha", {"lrn"})) v1.mutable_lrn_param()->set_alpha(v0.alpha());
  if (for_types(v0.has_beta(), "beta", {"lrn"})) v1.mutable_lrn_param()->set_beta(v0.beta());
  if (for_types(v0.has_k(), "k", {"lrn"})) v1.mutable_lrn_param()->set_k(v0.k());
  if (for_types(v0.has_source(), "source", {"data", "infogain_loss"})) {
    if (t == "data") v1.mutable_data_param()->add_source(v0.source());
    else v1.mutable_infogain_loss_param()->set_source(v0.source());
  }
  // The data settings go to data_param here; UpgradeNet moves the transformation ones on.
  pb::DataParameter* dp = nullptr;
  auto data = [&] { return dp ? dp : (dp = v1.mutable_data_param()); };
  if (for_types(v0.has_scale(), "scale", {"data"})) data()->set_scale(v0.scale());
  if (for_types(v0.has_meanfile(), "meanfile", {"data"})) data()->set_mean_file(v0.meanfile());
  if (for_types(v0.has_batchsize(), "batchsize", {"data"})) data()->set_batch_size(v0.batchsize());
  if (for_types(v0.has_cropsize(), "cropsize", {"data"})) data()->set_crop_size(v0.cropsize());
  if (for_types(v0.has_mirror(), "mirror", {"data"})) data()->set_mirror(v0.mirror());
  if (for_types(v0.has_rand_skip(), "rand_skip", {"data"})) data()->set_rand_skip(v0.rand_skip());
  if (for_types(v0.has_concat_dim(), "concat_dim", {"concat"}))
    v1.mutable_concat_param()->set_concat_dim(v0.concat_dim());
  return v1;
}

// One V1 layer in the current format.
pb::LayerParameter FromV1(const V1& v1, const std::string& where) {
  pb::LayerParameter lp;
  if (v1.has_name()) lp.set_name(v1.name());
  auto type = V1TypeNames().find(v1.type());
  HS_REQUIRE(v1.has_type() && type != V1TypeNames().end())
      << where << "V1 layer '" << v1.name() << "' has no type";
  lp.set_type(type->second);
  *lp.mutable_bottom() = v1.bottom();
  *lp.mutable_top() = v1.top();
  *lp.mutable_include() = v1.include();
  *lp.mutable_exclude() = v1.exclude();
  *lp.mutable_blobs() = v1.blobs();
  *lp.mutable_loss_weight() = v1.loss_weight();
  // Per-blob settings, each list indexed by blob: one ParamSpec per blob any list names.
  const int n = std::max({v1.param_size(), v1.blob_share_mode_size(), v1.blobs_lr_size(),
                          v1.weight_decay_size()});
  for (int i = 0; i < n; ++i) {
    pb::ParamSpec* p = lp.add_param();
    if (i < v1.param_size()) p->set_name(v1.param(i));
    if (i < v1.blob_share_mode_size())
      p->set_share_mode(static_cast<pb::ParamSpec::DimCheckMode>(v1.blob_share_mode(i)));
    if (i < v1.blobs_lr_size()) p->set_lr_mult(v1.blobs_lr(i));
    if (i < v1.weight_decay_size()) p->set_decay_mult(v1.weight_decay(i));
  }
  // The *_param messages are the same types under the same names in both formats.
  const gp::Reflection* from = v1.GetReflection();
  const gp::Reflection* to = lp.GetReflection();
  std::vector<const gp::FieldDescriptor*> fields;
  from->ListFields(v1, &fields);
  for (const gp::FieldDescriptor* f : fields) {
    const std::string& fname = f->name();
    if (fname.size() < 6 || fname.compare(fname.size() - 6, 6, "_param") != 0) continue;
    const gp::FieldDescriptor* g = lp.GetDescriptor()->FindFieldByName(fname);
    HS_CHECK(g && g->message_type() == f->message_type()) << fname;
    to->MutableMessage(&lp, g)->CopyFrom(from->GetMessage(v1, f));
  }
  // Caffe's first data layers kept the transformation settings in data_param.
  if (lp.has_data_param()) {
    pb::DataParameter* dp = lp.mutable_data_param();
    pb::TransformationParameter* tp = lp.mutable_transform_param();
    if (dp->has_scale()) tp->set_scale(dp->scale());
    if (dp->has_mean_file()) tp->set_mean_file(dp->mean_file());
    if (dp->has_crop_size()) tp->set_crop_size(dp->crop_size());
    if (dp->has_mirror()) tp->set_mirror(dp->mirror());
    dp->clear_scale();
    dp->clear_mean_file();
    dp->clear_crop_size();
    dp->clear_mirror();
    if (tp->ByteSizeLong() == 0 && !v1.has_transform_param()) lp.clear_transform_param();
  }
  return lp;
}

}  // namespace

NetUpgrade UpgradeNet(pb::NetParameter* net, const std::function<std::string(int)>& where) {
  NetUpgrade u;
  if (net->layers_size() == 0) return u;
  HS_REQUIRE(net->layer_size() == 0)
      << where(0) << "the net mixes 'layers {}' (the V1 format) with 'layer {}' (the current "
      << "format); give every layer in one format ('hogstream upgrade' converts a V1 file)";
  u.read = net->layers_size();
  u.version = 1;
  for (const V1& e : net->layers())
    if (e.has_layer()) u.version = 0;
  const std::vector<int> kept = FoldV0Padding(net, where);
  for (int i : kept) {
    const V1& e = net->layers(i);
    if (e.has_layer()) {
      *net->add_layer() = FromV1(FromV0(e, where(i)), where(i));
    } else {
      *net->add_layer() = FromV1(e, where(i));
    }
    u.origin.push_back(i);
  }
  net->clear_layers();
  return u;
}

std::string UpgradeNotice(const std::string& file, const NetUpgrade& u) {
  std::ostringstream os;
  os << file << ": a V" << u.version << " net (" << u.read << " layers), upgraded on read; "
     << "'hogstream upgrade " << file << "' writes the current format";
  return os.str();
}

int UpgradeSolverNets(pb::SolverParameter* solver, const std::string& file) {
  int upgraded = 0;
  auto one = [&](pb::NetParameter* net, const std::string& field) {
    const std::string where = file + ": " + field + ": ";
    if (UpgradeNet(net, [&](int) { return where; }).version < 2) ++upgraded;
  };
  if (solver->has_net_param()) one(solver->mutable_net_param(), "net_param");
  if (solver->has_train_net_param()) one(solver->mutable_train_net_param(), "train_net_param");
  for (int i = 0; i < solver->test_net_param_size(); ++i)
    one(solver->mutable_test_net_param(i), "test_net_param " + std::to_string(i));
  return upgraded;
}

bool UpgradeSolver(pb::SolverParameter* solver, const std::string& file) {
  bool changed = UpgradeSolverNets(solver, file) > 0;
  if (solver->has_solver_type()) {
    HS_REQUIRE(!solver->has_type())
        << file << ": gives both solver_type (the old enum) and type; keep only type";
    static const char* kNames[] = {"SGD", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam"};
    solver->set_type(kNames[solver->solver_type()]);
    solver->clear_solver_type();
    changed = true;
  }
  return changed;
}

namespace {

// "FILE:LINE:COLUMN: ..." -> (LINE, COLUMN); (0, 0) for a message without them.
std::pair<int, int> ErrorPosition(const std::string& path, const std::string& message) {
  int line = 0, column = 0;
  if (message.compare(0, path.size() + 1, path + ":") == 0)
    std::sscanf(message.c_str() + path.size() + 1, "%d:%d", &line, &column);
  return {line, column};
}

// The 1-based line of each `layers` entry of a net file, for messages.
std::vector<int> LayersLines(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  pb::NetParameter net;
  gp::TextFormat::Parser parser;
  gp::TextFormat::ParseInfoTree tree;
  parser.WriteLocationsTo(&tree);
  std::vector<int> lines;
  if (!parser.ParseFromString(text.str(), &net)) return lines;  // read once already: no-op
  const gp::FieldDescriptor* f = net.GetDescriptor()->FindFieldByName("layers");
  for (int i = 0; i < net.layers_size(); ++i) lines.push_back(tree.GetLocation(f, i).line + 1);
  return lines;
}

}  // namespace

UpgradedFile UpgradeFile(const std::string& path) {
  UpgradedFile out;
  pb::NetParameter net;
  std::string net_error;
  try {
    ReadTextProto(path, &net);
  } catch (const Error& e) {
    net_error = e.what();
  }
  if (net_error.empty()) {
    const std::vector<int> lines = LayersLines(path);
    const NetUpgrade u = UpgradeNet(&net, [&](int i) {
      return i < static_cast<int>(lines.size()) ? path + ":" + std::to_string(lines[i]) + ": "
                                                 : path + ": ";
    });
    HS_CHECK(gp::TextFormat::PrintToString(net, &out.text));
    std::ostringstream s;
    if (u.version == 2) {
      s << path << ": already in the current format (" << net.layer_size() << " layers)";
    } else {
      s << path << ": a V" << u.version << " net (" << u.read << " layers) upgraded to "
        << net.layer_size() << " layers in the current format";
    }
    out.summary = s.str();
    return out;
  }
  // Not a net: perhaps a solver. When it is neither, the parse that got further says why.
  pb::SolverParameter solver;
  try {
    ReadTextProto(path, &solver);
  } catch (const Error& e) {
    if (ErrorPosition(path, e.what()) > ErrorPosition(path, net_error)) throw;
    throw Error(net_error);
  }
  const int nets = UpgradeSolverNets(&solver, path);
  const bool type = solver.has_solver_type();
  UpgradeSolver(&solver, path);
  HS_CHECK(gp::TextFormat::PrintToString(solver, &out.text));
  std::ostringstream s;
  s << path << ": a solver";
  if (type) s << "; solver_type became type: \"" << solver.type() << "\"";
  if (nets) s << "; " << nets << " net(s) written inside it upgraded";
  if (!type && !nets) s << ", already in the current format";
  out.summary = s.str();
  return out;
}

}  // namespace hogstream
