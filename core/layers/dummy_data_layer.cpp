// DummyData layer: shapes and fills its tops.
#include "core/layers/dummy_data_layer.hpp"

#include "core/filler.hpp"

namespace hogstream {

void DummyDataLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::DummyDataParameter& p = param_.dummy_data_param();
  const int tops = static_cast<int>(top.size());
  auto one_or_per_top = [&](int n, const char* field) {
    HS_REQUIRE(n == 1 || n == tops) << "dummy_data_param has " << n << " " << field << " value(s)"
                                    << " for " << tops << " tops; give one or one per top";
  };

  HS_REQUIRE(p.data_filler_size() <= 1 || p.data_filler_size() == tops)
      << "dummy_data_param has " << p.data_filler_size() << " data_filler(s) for " << tops
      << " tops; give none, one, or one per top";
  fillers_.assign(p.data_filler().begin(), p.data_filler().end());
  if (fillers_.empty()) fillers_.emplace_back();  // constant 0
  for (const auto& f : fillers_) CheckFiller(f);

  const bool legacy = p.num_size() || p.channels_size() || p.height_size() || p.width_size();
  if (legacy) {
    HS_REQUIRE(p.shape_size() == 0)
        << "dummy_data_param gives both shape and the legacy num/channels/height/width";
    one_or_per_top(p.num_size(), "num");
    one_or_per_top(p.channels_size(), "channels");
    one_or_per_top(p.height_size(), "height");
    one_or_per_top(p.width_size(), "width");
  } else {
    one_or_per_top(p.shape_size(), "shape");
  }
  auto pick = [](const auto& list, int i) {
    return static_cast<int64_t>(list[list.size() == 1 ? 0 : i]);
  };
  // Every shape is checked, alone and together, before the first constant fill allocates.
  std::vector<std::vector<int>> shapes;
  double bytes = 0;
  for (int i = 0; i < tops; ++i) {
    std::vector<int64_t> dims;
    if (legacy) {
      dims = {pick(p.num(), i), pick(p.channels(), i), pick(p.height(), i), pick(p.width(), i)};
    } else {
      const pb::BlobShape& s = p.shape(p.shape_size() == 1 ? 0 : i);
      dims.assign(s.dim().begin(), s.dim().end());
    }
    const std::string name = i < param_.top_size() ? param_.top(i) : std::to_string(i);
    shapes.push_back(CheckedShape(dims, "top '" + name + "'"));
    double count = 1;
    for (int d : shapes.back()) count *= d;
    bytes += 2.0 * sizeof(float) * count;  // data and gradient
  }
  RequireMemory(bytes, "the tops with their gradients");
  for (int i = 0; i < tops; ++i) {
    top[i]->Reshape(shapes[i]);
    if (FillerFor(i).type() == "constant") Fill(FillerFor(i), top[i]);
  }
}

void DummyDataLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  for (int i = 0; i < static_cast<int>(top.size()); ++i)
    if (FillerFor(i).type() != "constant") Fill(FillerFor(i), top[i]);
}

HS_REGISTER_LAYER(DummyData, DummyDataLayer);

}  // namespace hogstream
