#include "core/gpu_engine.hpp"
#include "core/math.hpp"
#include "core/solvers/solvers.hpp"

namespace hogstream {

void SGDSolver::ComputeUpdateValue(int id, float rate) {
  Blob* p = net_->learnable_params()[id];
  const float lr = rate * net_->params_lr()[id];
  float* h = history_[id]->mutable_cpu_data();
  float* g = p->mutable_cpu_diff();
  const float momentum = param_.momentum();
  const int n = p->count();
  for (int i = 0; i < n; ++i) g[i] = h[i] = momentum * h[i] + lr * g[i];
}

// Regularize, ComputeUpdateValue and the base's w -= diff in one kernel (GpuKernels::update).
void SGDSolver::UpdateOnDevice(int id, float rate) {
  DeviceUpdate u;
  u.rule = DeviceUpdate::kSgd;
  u.lr = rate * net_->params_lr()[id];
  u.momentum = param_.momentum();
  RunDeviceUpdate(id, u);
}

}  // namespace hogstream
