#include "core/gpu_engine.hpp"
#include "core/solvers/solvers.hpp"

namespace hogstream {

void NesterovSolver::ComputeUpdateValue(int id, float rate) {
  Blob* p = net_->learnable_params()[id];
  const float lr = rate * net_->params_lr()[id];
  const float m = param_.momentum();
  float* h = history_[id]->mutable_cpu_data();
  float* g = p->mutable_cpu_diff();
  for (int i = 0; i < p->count(); ++i) {
    const float prev = h[i];
    h[i] = m * h[i] + lr * g[i];
    g[i] = (1 + m) * h[i] - m * prev;
  }
}

void NesterovSolver::UpdateOnDevice(int id, float rate) {
  DeviceUpdate u;
  u.rule = DeviceUpdate::kNesterov;
  u.lr = rate * net_->params_lr()[id];
  u.momentum = param_.momentum();
  RunDeviceUpdate(id, u);
}

}  // namespace hogstream
