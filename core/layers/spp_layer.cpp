// SPP layer: one Pooling layer per level (its settings computed from the input's size),
// outputs copied into the top side by side per image; backward runs each level's pooling
// backward and sums the levels' gradients.
#include "core/layers/spp_layer.hpp"

#include "core/math.hpp"

namespace hogstream {

void SPPLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const auto& p = param_.spp_param();
  HS_REQUIRE(p.has_pyramid_height() && p.pyramid_height() > 0 && p.pyramid_height() <= 16)
      << "spp_param.pyramid_height must be given, 1 to 16";
  HS_REQUIRE(p.pool() != pb::SPPParameter::STOCHASTIC) << "STOCHASTIC pooling is not supported (MAX or AVE)";
  levels_ = static_cast<int>(p.pyramid_height());
}

void SPPLayer::BuildLevels(const Blob& bottom) {
  height_ = bottom.shape(2);
  width_ = bottom.shape(3);
  pools_.clear();
  pooled_.clear();
  for (int l = 0; l < levels_; ++l) {
    const int bins = 1 << l;
    // Bins of ceil(extent / bins), the leftover split as padding on both sides (the extra
    // one, if odd, on the far side).
    const int kh = (height_ + bins - 1) / bins, kw = (width_ + bins - 1) / bins;
    pb::LayerParameter lp;
    lp.set_name(param_.name() + "/level" + std::to_string(l));
    lp.set_type("Pooling");
    auto* pp = lp.mutable_pooling_param();
    pp->set_pool(param_.spp_param().pool() == pb::SPPParameter::AVE ? pb::PoolingParameter::AVE
                                                                    : pb::PoolingParameter::MAX);
    pp->set_kernel_h(kh);
    pp->set_kernel_w(kw);
    pp->set_stride_h(kh);
    pp->set_stride_w(kw);
    const int pad_h = (kh * bins - height_ + 1) / 2, pad_w = (kw * bins - width_ + 1) / 2;
    pp->set_pad_h(pad_h);
    pp->set_pad_w(pad_w);
    HS_REQUIRE(pad_h < kh && pad_w < kw)
        << "a " << height_ << "x" << width_ << " input is too small for " << levels_
        << " pyramid levels (level " << l << " has " << bins << "x" << bins << " bins)";
    pools_.push_back(CreateLayer(lp));
    pooled_.push_back(std::make_unique<Blob>());
    pools_.back()->SetUp({const_cast<Blob*>(&bottom)}, {pooled_.back().get()});
    const Blob& out = *pooled_.back();
    HS_CHECK(out.shape(2) == bins && out.shape(3) == bins)
        << "level " << l << " pools a " << height_ << "x" << width_ << " input into "
        << out.shape(2) << "x" << out.shape(3) << " bins, not " << bins;
  }
}

void SPPLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const Blob& x = *bottom[0];
  HS_REQUIRE(x.num_axes() == 4) << "needs a 4-d (N, C, H, W) input, got " << x.shape_string();
  if (x.shape(2) != height_ || x.shape(3) != width_) BuildLevels(x);
  for (size_t l = 0; l < pools_.size(); ++l) pools_[l]->Reshape({bottom[0]}, {pooled_[l].get()});
  if (levels_ == 1) {
    top[0]->ReshapeLike(*pooled_[0]);
    return;
  }
  int per_image = 0;
  for (const auto& b : pooled_) per_image += b->count(1);
  top[0]->Reshape({x.shape(0), per_image});
}

void SPPLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const int num = bottom[0]->shape(0), per_image = top[0]->count() / std::max(num, 1);
  float* y = top[0]->mutable_cpu_data();
  int at = 0;
  for (size_t l = 0; l < pools_.size(); ++l) {
    pools_[l]->Forward({bottom[0]}, {pooled_[l].get()});
    const int len = pooled_[l]->count(1);
    const float* p = pooled_[l]->cpu_data();
    for (int n = 0; n < num; ++n) copy(len, p + n * len, y + n * per_image + at);
    at += len;
  }
}

void SPPLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                            const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const int num = bottom[0]->shape(0), per_image = top[0]->count() / std::max(num, 1);
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  set(bottom[0]->count(), 0.f, dx);
  scratch_.ReshapeLike(*bottom[0]);
  scratch_.ShareData(*bottom[0]);
  int at = 0;
  for (size_t l = 0; l < pools_.size(); ++l) {
    const int len = pooled_[l]->count(1);
    float* dp = pooled_[l]->mutable_cpu_diff();
    for (int n = 0; n < num; ++n) copy(len, dy + n * per_image + at, dp + n * len);
    at += len;
    pools_[l]->Backward({pooled_[l].get()}, {true}, {&scratch_});
    axpy(bottom[0]->count(), 1.f, scratch_.cpu_diff(), dx);
  }
}

HS_REGISTER_LAYER(SPP, SPPLayer);

}  // namespace hogstream
