#include "core/layers/eltwise_layer.hpp"

#include "core/math.hpp"

namespace hogstream {

void EltwiseLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::EltwiseParameter& p = param_.eltwise_param();
  op_ = p.operation();
  // Caffe refuses coefficients only for PROD; MAX ignores them.
  HS_REQUIRE(op_ != pb::EltwiseParameter::PROD || p.coeff_size() == 0)
      << "coeff applies to SUM only, not PROD";
  HS_REQUIRE(p.coeff_size() == 0 || p.coeff_size() == static_cast<int>(bottom.size()))
      << "takes one coeff per bottom: " << p.coeff_size() << " coeff(s) for " << bottom.size()
      << " bottoms";
  coeff_.assign(bottom.size(), 1.f);
  for (int i = 0; i < p.coeff_size(); ++i) coeff_[i] = p.coeff(i);
}

void EltwiseLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  for (size_t i = 1; i < bottom.size(); ++i) {
    HS_REQUIRE(bottom[i]->shape() == bottom[0]->shape())
        << "bottoms must have the same shape: bottom 0 is " << bottom[0]->shape_string()
        << ", bottom " << i << " is " << bottom[i]->shape_string();
  }
  top[0]->ReshapeLike(*bottom[0]);
  if (op_ == pb::EltwiseParameter::MAX) mask_.resize(bottom[0]->count());
}

void EltwiseLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const int n = top[0]->count();
  float* y = top[0]->mutable_cpu_data();
  switch (op_) {
    case pb::EltwiseParameter::PROD:
      vmul(n, bottom[0]->cpu_data(), bottom[1]->cpu_data(), y);
      for (size_t i = 2; i < bottom.size(); ++i) vmul(n, y, bottom[i]->cpu_data(), y);
      break;
    case pb::EltwiseParameter::SUM:
      scale(n, coeff_[0], bottom[0]->cpu_data(), y);
      for (size_t i = 1; i < bottom.size(); ++i) axpy(n, coeff_[i], bottom[i]->cpu_data(), y);
      break;
    case pb::EltwiseParameter::MAX: {
      const float* a = bottom[0]->cpu_data();
      const float* b = bottom[1]->cpu_data();
      for (int j = 0; j < n; ++j) {
        const bool first = a[j] > b[j];
        y[j] = first ? a[j] : b[j];
        mask_[j] = first ? 0 : 1;
      }
      for (size_t i = 2; i < bottom.size(); ++i) {
        const float* x = bottom[i]->cpu_data();
        for (int j = 0; j < n; ++j) {
          const bool larger = x[j] > y[j];
          y[j] = larger ? x[j] : y[j];
          mask_[j] = larger ? static_cast<int>(i) : mask_[j];
        }
      }
      break;
    }
  }
}

void EltwiseLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                const Blobs& bottom) {
  const int n = top[0]->count();
  const float* dy = top[0]->cpu_diff();
  for (size_t i = 0; i < bottom.size(); ++i) {
    if (!propagate_down[i]) continue;
    float* dx = bottom[i]->mutable_cpu_diff();
    switch (op_) {
      case pb::EltwiseParameter::PROD:
        if (param_.eltwise_param().stable_prod_grad()) {
          // The product of the other bottoms, multiplied in index order.
          const size_t first = i == 0 ? 1 : 0;
          copy(n, bottom[first]->cpu_data(), dx);
          for (size_t j = first + 1; j < bottom.size(); ++j)
            if (j != i) vmul(n, dx, bottom[j]->cpu_data(), dx);
        } else {
          vdiv(n, top[0]->cpu_data(), bottom[i]->cpu_data(), dx);
        }
        vmul(n, dx, dy, dx);
        break;
      case pb::EltwiseParameter::SUM:
        scale(n, coeff_[i], dy, dx);
        break;
      case pb::EltwiseParameter::MAX:
        for (int j = 0; j < n; ++j) dx[j] = mask_[j] == static_cast<int>(i) ? dy[j] : 0.f;
        break;
    }
  }
}

HS_REGISTER_LAYER(Eltwise, EltwiseLayer);

}  // namespace hogstream
