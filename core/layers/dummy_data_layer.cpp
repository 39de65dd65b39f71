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
    return static_cast<int>(list[list.size() == 1 ? 0 : i]);
  };
  for (int i = 0; i < tops; ++i) {
    if (legacy) {
      top[i]->Reshape({pick(p.num(), i), pick(p.channels(), i), pick(p.height(), i),
                       pick(p.width(), i)});
    } else {
      top[i]->Reshape(p.shape(p.shape_size() == 1 ? 0 : i));
    }
    if (FillerFor(i).type() == "constant") Fill(FillerFor(i), top[i]);
  }
}

void DummyDataLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  for (int i = 0; i < static_cast<int>(top.size()); ++i)
    if (FillerFor(i).type() != "constant") Fill(FillerFor(i), top[i]);
}

HS_REGISTER_LAYER(DummyData, DummyDataLayer);

}  // namespace hogstream
